/* Two devices of one platform (the 'context_two_devices' test runs it with POCL_DEVICES="pthread
 * pthread" and MHLA_DEVICE=pthread): contexts on each compute the same results. The platform is that
 * of the device MHLA_DEVICE (or the default) selects; when MHLA_DEVICE names one, its platform must
 * have two devices (the test claims them, whatever platforms are listed before it). Without
 * MHLA_DEVICE, any two devices do; with fewer it tests nothing and exits 77, meson's SKIP (the
 * plain 'two_devices' test on a one-device machine). */
#include "helpers.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

static void test_second_device(void **state)
{
    (void)state;
    size_t count = 0, selected = 0;
    assert_int_equal(mhla_device_list(NULL, 0, &count), MHLA_OK);
    mhla_device_info *infos = calloc(count ? count : 1, sizeof *infos);
    assert_non_null(infos);
    assert_int_equal(mhla_device_list(infos, count, &count), MHLA_OK);
    const char *claim = getenv("MHLA_DEVICE");
    const int claimed = claim && *claim;
    assert_int_equal(mhla_device_selected(NULL, &selected), MHLA_OK);
    char first[16] = "", second[16] = "";
    for (size_t i = 0; i < count; ++i) /* the selected device's platform: its first two devices */
        if (infos[i].platform_index == infos[selected].platform_index && infos[i].device_index < 2)
            snprintf(infos[i].device_index ? second : first, sizeof first, "%d:%d", infos[i].platform_index,
                     infos[i].device_index);
    if (!*second && claimed)
        fail_msg("MHLA_DEVICE='%s' selects %s, whose platform has one device: two are claimed", claim,
                 infos[selected].device_name);
    if (!*second && count >= 2)
        snprintf(first, sizeof first, "0"), snprintf(second, sizeof second, "1");
    free(infos);
    if (!*second) {
        print_message("%zu OpenCL device(s): two are needed\n", count);
        test_skip();
    }
    print_message("devices %s and %s\n", first, second);
    mhla_context *a = NULL, *b = NULL;
    poison_outputs();
    assert_int_equal(mhla_context_create(first, &a), MHLA_OK);
    assert_int_equal(mhla_context_create(second, &b), MHLA_OK);
    assert_true(mhla_context_device(a) != mhla_context_device(b));
    say_device(a), say_device(b);
    forward_2d_ok(b, 8, 3);
    forward_2d_ok(a, 8, 3);
    mhla_context_destroy(a);
    mhla_context_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_second_device),
    };
    return run_group("two_devices", tests, NULL, NULL);
}
