/* Two devices of one platform (the 'context_two_devices' test runs it with POCL_DEVICES="pthread
 * pthread"): contexts on each compute the same results. With fewer than two devices it tests
 * nothing and exits 77, meson's SKIP (the plain 'two_devices' test on a one-device machine). */
#include "helpers.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

static void test_second_device(void **state)
{
    (void)state;
    size_t count = 0;
    assert_int_equal(mhla_device_list(NULL, 0, &count), MHLA_OK);
    if (count < 2) {
        print_message("%zu OpenCL device(s): two are needed\n", count);
        test_skip();
    }
    mhla_context *first = NULL, *second = NULL;
    poison_outputs();
    assert_int_equal(mhla_context_create("0", &first), MHLA_OK);
    assert_int_equal(mhla_context_create("1", &second), MHLA_OK);
    assert_true(mhla_context_device(first) != mhla_context_device(second));
    forward_2d_ok(second, 8, 3);
    forward_2d_ok(first, 8, 3);
    mhla_context_destroy(first);
    mhla_context_destroy(second);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_second_device),
    };
    return run_group("two_devices", tests, NULL, NULL);
}
