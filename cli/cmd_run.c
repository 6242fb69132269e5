/* `mhla run`: one MHLA forward pass over .npy files on an OpenCL device, optionally checked
 * against the double-precision reference (--check) and timed with profiling events (--repeat).
 * What it shares with grad and diagnose (options, inputs, grids, mixing, output) is run_common.c;
 * the causal options' rules are run_causal.c, --recurrent run_recurrent.c and --mpi run_mpi.c. */
#include "cli.h"
#include "run.h"

#include <mhla_reference.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* In two parts: C99 only promises string literals of 4095 characters. */
static const char help_head[] =
    "usage: mhla run --q Q.npy --k K.npy --v V.npy --out O.npy --blocks ... [options]\n"
    "       mhla run --q Q.npy --k K.npy --v V.npy --out O.npy --causal [--chunk C] [--recurrent]\n"
    "                [--cu-seqlens CU.npy] [options]\n"
    "\n"
    "Runs MHLA (docs/spec.md) on the OpenCL device and writes the output. Q and K are [B,N,H,Dk], V is\n"
    "[B,N,H,Dv] (or [B,H,N,D] with --layout bhnd), float32 or float16 .npy files, little-endian,\n"
    "C order. O.npy is [B,N,H,Dv] in the same layout: float32, or float16 when the inputs are.\n"
    "It is written to a temporary file and renamed: a failed run leaves no output behind.\n"
    "\n"
    "inputs and output:\n"
    "  --q Q.npy --k K.npy --v V.npy --out O.npy\n"
    "  --layout bnhd|bhnd            the tensors' layout (default bnhd)\n"
    "tokens and blocks:\n"
    "  --grid N|HsxWs|TxHsxWs        token grid, product N (default: N from Q, 1D)\n"
    "  --blocks M|BHxBW|BTxBHxBW     block grid dividing the token grid, with as many extents\n"
    "                                (required without --causal)\n"
    "cross-attention (K and V with their own N; grouped heads: K and V with H_kv heads dividing\n"
    "Q's H, taken from the arrays):\n"
    "  --kv-grid N|HsxWs|TxHsxWs     the keys' token grid (default: --grid where K has Q's N, else\n"
    "                                1D of K's N)\n"
    "  --kv-blocks M|BHxBW|BTxBHxBW  its block grid (default --blocks on the query grid; required\n"
    "                                otherwise)\n"
    "mixing matrix (M = number of blocks; with --causal, M = ceil(N/C) chunks):\n"
    "  --mixing MC.npy               an M x M float32 matrix Mc[i][b] (e.g. a trained one; M x M_kv\n"
    "                                for cross-attention: rows query blocks, columns key blocks); with\n"
    "                                --causal any square one with at least M rows (a model trained\n"
    "                                on longer sequences), of which the lower triangle of the\n"
    "                                leading M x M block is read\n"
    "  --init KIND[:PARAM]           else an initializer: linear, cos, exp[:SIGMA], gaussian,\n"
    "                                local[:THRES], paper, causal-uniform (default linear,\n"
    "                                causal-uniform with --causal); see 'mhla init-mixing'\n"
    "attention:\n"
    "  --feature-map none|relu|relu-eps|elu1   phi on q and k (default relu-eps; relu --causal)\n"
    "  --feature-eps X               relu-eps offset (default 1e-6)\n"
    "  --scale X                     q~ = X * phi(q), X != 0 (default 1; Dk^-0.5 with --causal)\n"
    "  --normalizer paper|official|none   (default paper; none with --causal, which does not\n"
    "                                take official)\n"
    "  --eps X                       added to every denominator (default 1e-6)\n";
static const char help_tail[] =
    "causal MHLA (docs/spec.md \"Causal MHLA\"; 1D: --grid N only, no --blocks):\n"
    "  --causal                      chunkwise causal attention: token t sees tokens <= t\n"
    "  --chunk C                     chunk size (default " MHLA_STRINGIFY(MHLA_DEFAULT_CHUNK)
    ", the library's; the last chunk may be\n"
    "                                partial). Part of the model: Mc's rows are chunks, so give the\n"
    "                                C that Mc was trained with\n"
    "  --recurrent                   run the streaming decoder token by token instead of the chunk\n"
    "                                form (the same outputs, to rounding)\n"
    "  --cu-seqlens CU.npy           packed variable-length sequences: S+1 int32 or int64 offsets\n"
    "                                (0 first, non-decreasing, N last) over inputs of batch 1; each\n"
    "                                sequence is chunked from its own start, M is ceil(longest/C)\n"
    "device:\n"
    "  --dtype f32|f16|bf16          storage of q, k, v and the output on the device, with\n"
    "                                float32 arithmetic (default: the inputs' dtype). Inputs\n"
    "                                are rounded to it first; --check runs the reference on the\n"
    "                                rounded inputs. The output file is float16 when the inputs\n"
    "                                are float16, else float32 (bf16 values are exact in it)\n"
    "  --device SPEC                 'P:D', an index or a name substring, as MHLA_DEVICE (see\n"
    "                                'mhla info'); default: MHLA_DEVICE, else the first GPU,\n"
    "                                else the first device\n"
    "  --check                       also run the double-precision reference and print\n"
    "                                'max_rel_err <value>'; exit 3 (the output is still written)\n"
    "                                when it exceeds docs/spec.md's tolerance (f32: 1e-5 up to N = 4096,\n"
    "                                1e-4 beyond; N of the longest sequence with --cu-seqlens)\n"
    "  --repeat R                    run R times after one untimed warm-up and print\n"
    "                                'time_ms median <m> min <a> max <b>' (device time per run;\n"
    "                                with --recurrent, the wall time of each run's whole token\n"
    "                                loop, host copies included)\n"
    "  --mpi                         under mpirun -np R: sequence parallelism (libmhla_mpi), each\n"
    "                                rank reading only its range of tokens (whole blocks or chunks;\n"
    "                                with --cu-seqlens, chunks of the packed sequences) on its own\n"
    "                                device (MHLA_DEVICE, else by node-local rank); rank 0 writes\n"
    "                                the output. Not with --check, --repeat or --recurrent\n"
    "\n"
    "exit codes: 0 success; 1 runtime or device failure; 2 usage or input error; 3 --check failed.\n";

/* ---- device -------------------------------------------------------------------------------- */

static int cl_fail(cl_int err, const char *what)
{
    return cli_fail(CLI_RUNTIME, "%s failed (OpenCL error %d)", what, (int)err);
}

/* The forward pass (causal plans: the chunk form; packed ones with their offsets). */
static mhla_status forward(const run_job *job, cl_event *done)
{
    const cl_mem *b = job->buf;
    if (job->cfg.varlen)
        return mhla_forward_varlen(job->plan, b[MHLA_TENSOR_Q], b[MHLA_TENSOR_K], b[MHLA_TENSOR_V],
                                   b[MHLA_TENSOR_MIXING], job->cu_seqlens, job->num_seqs, b[MHLA_TENSOR_OUT], 0, NULL,
                                   done);
    return mhla_forward(job->plan, b[MHLA_TENSOR_Q], b[MHLA_TENSOR_K], b[MHLA_TENSOR_V], b[MHLA_TENSOR_MIXING],
                        b[MHLA_TENSOR_OUT], 0, NULL, done);
}

static int run_device(run_job *job)
{
    mhla_status st;
    int rc;
    if ((rc = run_open_context(job)) != 0)
        return rc;
    if ((st = mhla_plan_create(job->ctx, &job->cfg, &job->plan)) != MHLA_OK)
        return run_device_fail(job, st, "run");

    const int wide = job->cfg.dtype == MHLA_DTYPE_F32;
    const void *host[5] = {wide ? (void *)job->f32[0] : job->dev16[0], wide ? (void *)job->f32[1] : job->dev16[1],
                           wide ? (void *)job->f32[2] : job->dev16[2], NULL, job->mixing};
    const size_t have[5] = {job->in[0].count, job->in[1].count, job->in[2].count, job->out_count,
                            (size_t)(job->mixing_rows * job->mixing_cols)};
    const size_t elem = wide ? sizeof(float) : sizeof(uint16_t);
    cl_int err = CL_SUCCESS;
    for (int t = 0; t < 5; ++t) {
        const size_t bytes = mhla_plan_tensor_bytes(job->plan, (mhla_tensor)t);
        const size_t held = have[t] * (t == MHLA_TENSOR_MIXING ? sizeof(float) : elem);
        if (bytes != held) /* the plan and the files disagree: a bug here, not a user error */
            return cli_fail(CLI_RUNTIME, "internal error: tensor %d needs %zu bytes, the input holds %zu", t, bytes,
                            held);
        job->buf[t] = clCreateBuffer(mhla_context_cl_context(job->ctx),
                                     host[t] ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_WRITE_ONLY, bytes,
                                     (void *)host[t], &err);
        if (err != CL_SUCCESS)
            return cl_fail(err, "clCreateBuffer");
    }

    /* --repeat: one warm-up (the first call also builds CLBlast's GEMM), then R timed runs, each
     * from a marker enqueued before it to the end of its output event (device time). Devices whose
     * profiling timestamps are all the same (rusticl 22.3 on llvmpipe) get the host clock instead,
     * from the queue being empty to the output's event completing, and say so. */
    cl_command_queue queue = mhla_context_queue(job->ctx);
    const int64_t runs = job->repeat ? job->repeat + 1 : 1;
    double *ms = job->repeat ? malloc((size_t)job->repeat * 2 * sizeof *ms) : NULL;
    double *wall = ms ? ms + job->repeat : NULL;
    int device_clock = 0;
    if (job->repeat && !ms)
        return cli_fail(CLI_RUNTIME, "out of host memory");
    for (int64_t r = 0; r < runs && rc == 0; ++r) {
        cl_event start = NULL, done = NULL;
        cl_ulong t0 = 0, t1 = 0;
        if (job->repeat && (err = clFinish(queue)) != CL_SUCCESS)
            rc = cl_fail(err, "clFinish");
        const double w0 = cli_now_ms();
        if (rc == 0 && job->repeat && (err = clEnqueueMarkerWithWaitList(queue, 0, NULL, &start)) != CL_SUCCESS)
            rc = cl_fail(err, "clEnqueueMarkerWithWaitList");
        else if (rc == 0 && (st = forward(job, &done)) != MHLA_OK)
            rc = run_device_fail(job, st, "run");
        else if (rc == 0 && (err = clWaitForEvents(1, &done)) != CL_SUCCESS)
            rc = cl_fail(err, "clWaitForEvents (the forward pass)");
        else if (rc == 0 && job->repeat &&
                 ((err = clGetEventProfilingInfo(start, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL)) !=
                      CL_SUCCESS ||
                  (err = clGetEventProfilingInfo(done, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL)) !=
                      CL_SUCCESS))
            rc = cl_fail(err, "--repeat: clGetEventProfilingInfo");
        else if (rc == 0 && job->repeat && r > 0) {
            ms[r - 1] = t1 > t0 ? (double)(t1 - t0) * 1e-6 : 0.0;
            wall[r - 1] = cli_now_ms() - w0;
            device_clock |= t1 > t0;
        }
        if (start)
            clReleaseEvent(start);
        if (done)
            clReleaseEvent(done);
    }
    if (rc == 0 && job->repeat) {
        if (!device_clock)
            printf("timing: host clock (%s reports no usable profiling timestamps)\n",
                   mhla_context_device_name(job->ctx));
        run_print_times(device_clock ? ms : wall, (size_t)job->repeat);
    }
    free(ms);
    if (rc != 0)
        return rc;
    const size_t out_count = job->out_count;
    if (!(job->result = malloc(out_count * sizeof *job->result)))
        return cli_fail(CLI_RUNTIME, "out of host memory for the output");
    if (wide) {
        if ((err = clEnqueueReadBuffer(queue, job->buf[MHLA_TENSOR_OUT], CL_TRUE, 0, out_count * sizeof *job->result,
                                       job->result, 0, NULL, NULL)) != CL_SUCCESS)
            return cl_fail(err, "clEnqueueReadBuffer (the output)");
        return 0;
    }
    uint16_t *bits = malloc(out_count * sizeof *bits);
    if (!bits)
        return cli_fail(CLI_RUNTIME, "out of host memory for the output");
    err = clEnqueueReadBuffer(queue, job->buf[MHLA_TENSOR_OUT], CL_TRUE, 0, out_count * sizeof *bits, bits, 0, NULL,
                              NULL);
    if (err == CL_SUCCESS)
        mhla_convert(MHLA_DTYPE_F32, job->result, job->cfg.dtype, bits, out_count);
    free(bits);
    return err == CL_SUCCESS ? 0 : cl_fail(err, "clEnqueueReadBuffer (the output)");
}

/* ---- check and output ---------------------------------------------------------------------- */

/* --check: the reference on the same inputs; stores max_rel_err in job->check_err and prints it. */
static int check(run_job *job)
{
    const size_t n = job->out_count;
    double *ref = malloc(n * sizeof *ref);
    if (!ref)
        return cli_fail(CLI_RUNTIME, "--check: out of host memory for the reference");
    const mhla_status st =
        job->cfg.varlen ? mhla_reference_forward_varlen(&job->cfg, job->f32[0], job->f32[1], job->f32[2], job->mixing,
                                                        job->cu_seqlens, job->num_seqs, ref)
                        : mhla_reference_forward(&job->cfg, job->f32[0], job->f32[1], job->f32[2], job->mixing, ref);
    if (st == MHLA_OK)
        job->check_err = mhla_max_rel_err(job->result, ref, n);
    free(ref);
    if (st != MHLA_OK)
        return cli_fail(cli_exit_code(st), "--check: %s", mhla_last_message());
    printf("max_rel_err %.3g\n", job->check_err);
    return 0;
}

int cmd_run(int argc, char **argv)
{
    run_job job;
    memset(&job, 0, sizeof job);
    job.out.fd = -1;
    run_model_options(job.o);
    job.o[O_OUT] = (cli_option){"--out", "O.npy", NULL};
    job.o[O_RECURRENT] = (cli_option){"--recurrent", NULL, NULL};
    job.o[O_REPEAT] = (cli_option){"--repeat", "R", NULL};
    job.o[O_MPI] = (cli_option){"--mpi", NULL, NULL};
    int help_shown = 0, rc;
    char err[512], help[sizeof help_head + sizeof help_tail];
    snprintf(help, sizeof help, "%s%s", help_head, help_tail);

    if ((rc = run_parse(&job, RUN_CMD, help, argc, argv, &help_shown)) != 0 || help_shown)
        goto done;
    if (job.o[O_MPI].value) {
#ifdef MHLA_CLI_MPI
        rc = run_mpi(&job);
#else
        rc = cli_fail(CLI_USAGE,
                      "--mpi: this mhla was built without MPI (install libopenmpi-dev, meson -Dmpi=enabled)");
#endif
        goto done;
    }
    if ((rc = run_read_inputs(&job)) != 0 || (rc = run_shape(&job)) != 0)
        goto done;
    /* The output's temporary exists before the work starts: a bad --out fails fast. SIGINT,
     * SIGTERM and SIGHUP wait until its guard is armed: one arriving between mkstemp and the guard
     * left the temporary behind (test_signal_removes_temporary, on a loaded machine). */
    sigset_t old_mask;
    cli_guard_hold(&old_mask);
    npy_status ws = npy_writer_open(&job.out, job.o[O_OUT].value, err, sizeof err);
    if (ws == NPY_OK)
        cli_guard_temp(job.out.tmp);
    cli_guard_release(&old_mask);
    if (ws != NPY_OK) {
        rc = cli_fail(cli_npy_exit_code(ws), "--out %s: %s", job.o[O_OUT].value, err);
        goto done;
    }
    if ((rc = job.o[O_RECURRENT].value ? causal_run_recurrent(&job) : run_device(&job)) != 0)
        goto done;
    if (job.o[O_CHECK].value && (rc = check(&job)) != 0)
        goto done;
    if ((rc = run_write_output(&job)) != 0)
        goto done;
    if (job.o[O_CHECK].value) {
        /* docs/spec.md's N ("Notation") is a sequence's length: the longest one when several are
         * packed. */
        const int64_t n = job.cfg.causal ? job.longest : job.cfg.seq_t * job.cfg.seq_h * job.cfg.seq_w;
        const double tol = mhla_reference_tolerance(job.cfg.dtype, n);
        if (!(job.check_err <= tol)) /* NaN fails too */
            rc = cli_fail(CLI_CHECK_FAILED, "--check: max_rel_err %.3g exceeds the tolerance %g (%s storage, N = %lld)",
                          job.check_err, tol, mhla_dtype_name(job.cfg.dtype), (long long)n);
    }
done:
    run_job_free(&job);
    return rc;
}
