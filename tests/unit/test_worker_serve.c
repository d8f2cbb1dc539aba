/*
 * test_worker_serve.c — `inferd-worker --serve` as the router drives it
 * (label model): a real worker process on a socketpair, HELLO with the KV
 * pool's fds over SCM_RIGHTS, READY, ADD / CANCEL / STATS_REQ / SHUTDOWN,
 * TOKENS and FINISHED back. The tokens must equal in-process generation of
 * the same prompts, the cancelled request must end "cancelled", and after
 * the worker exits no block may be held.
 *
 * Usage (CTest passes it): test_worker_serve PATH-TO-inferd-worker
 */
#include "kvpool/kvparams.h"
#include "testutil.h"

#include "error.h"
#include "fdpass.h"
#include "kvpool/kvpool.h"
#include "proto/wire.h"
#include "worker/backend.h"
#include "worker/generate.h"
#include "worker/model.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *worker_bin;
static char model_path[4096];

#define N_REQ 3
#define N_NEW 8

static int32_t prompts[N_REQ + 1][64];
static int plen[N_REQ + 1] = {7, 23, 40, 60};

static void send_msg(int sock, const ifd_wire_msg_t *m)
{
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_wire_encode(&b, m), 0);
    ck_assert_int_eq(write(sock, b.data, b.len), (ssize_t)b.len);
    ifd_buf_free(&b);
}

static int read_msg(int sock, ifd_wire_reader_t *rd, ifd_wire_msg_t *m)
{
    for (;;) {
        int rc = ifd_wire_reader_next_msg(rd, m);
        if (rc != 0)
            return rc;
        char buf[65536];
        ssize_t n = read(sock, buf, sizeof buf);
        if (n <= 0)
            return IFD_ECLOSED;
        ck_assert_int_eq(ifd_wire_reader_feed(rd, buf, (size_t)n), 0);
    }
}

START_TEST(test_serve_protocol)
{
    /* reference outputs, in process */
    char err[512];
    ifd_backend_t *be;
    ifd_model_t *m;
    ck_assert_int_eq(ifd_backend_cpu_create(&be, 0), 0);
    ck_assert_msg(ifd_model_load(&m, model_path, be, err, sizeof err) == 0, "%s", err);
    int32_t ref[N_REQ][N_NEW];
    srand(7);
    for (int i = 0; i <= N_REQ; i++)
        for (int j = 0; j < plen[i]; j++)
            prompts[i][j] = 300 + rand() % 30000;
    for (int i = 0; i < N_REQ; i++) {
        ifd_generate_params_t gp = ifd_generate_default_params();
        gp.n_predict = N_NEW;
        gp.ignore_eos = true;
        ifd_generate_result_t r;
        ck_assert_int_eq(ifd_generate(m, prompts[i], plen[i], &gp, &r), 0);
        memcpy(ref[i], r.tokens, sizeof ref[i]);
        ifd_generate_result_free(&r);
    }
    const ifd_model_config_t *cfg = ifd_model_config(m);

    ifd_kvpool_params_t kp = ifd_kvpool_model_params(cfg);
    kp.n_blocks = 64;
    kp.n_workers = 4;
    kp.fingerprint = 0x1234;
    ifd_kvpool_t *pool;
    ck_assert_int_eq(ifd_kvpool_create(&kp, &pool), 0);

    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(sv[1], 3); /* dup2 clears close-on-exec on the copy */
        execl(worker_bin, worker_bin, "--serve", "--fd", "3", (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    int sock = sv[0];

    ifd_wire_msg_t hello = {.type = IFD_WIRE_HELLO};
    ifd_wire_hello_t *h = &hello.u.hello;
    h->slot = 2;
    h->model_path = model_path;
    h->backend = (char *)"cpu";
    h->device = -1;
    h->n_fds = 2;
    h->kv.n_layers = (uint32_t)kp.n_layers;
    h->kv.n_kv_heads = (uint32_t)kp.n_kv_heads;
    h->kv.head_dim = (uint32_t)kp.head_dim;
    h->kv.dtype = 0;
    h->kv.block_size = 16;
    h->kv.n_blocks = 64;
    h->kv.fingerprint = 0x1234;
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_wire_encode(&b, &hello), 0);
    int fds[2] = {ifd_kvpool_meta_fd(pool), ifd_kvpool_data_fd(pool, 0)};
    ck_assert_int_eq(ifd_fdpass_send(sock, b.data, b.len, fds, 2), 0);
    ifd_buf_free(&b);

    ifd_wire_reader_t rd;
    ifd_wire_reader_init(&rd, 0);
    ifd_wire_msg_t msg;
    ck_assert_int_eq(read_msg(sock, &rd, &msg), 1);
    ck_assert_int_eq(msg.type, IFD_WIRE_READY);
    ck_assert_uint_eq(msg.u.ready.slot, 2);
    ck_assert_uint_eq(msg.u.ready.n_vocab, cfg->n_vocab);
    ifd_wire_msg_free(&msg);

    for (int i = 0; i <= N_REQ; i++) {
        ifd_wire_msg_t a = {.type = IFD_WIRE_ADD};
        a.u.add.id = (uint64_t)(i + 1);
        a.u.add.tokens = prompts[i];
        a.u.add.n_tokens = (uint32_t)plen[i];
        a.u.add.sampling = ifd_wire_default_sampling();
        a.u.add.sampling.temperature = 0;
        a.u.add.max_tokens = i == N_REQ ? 1000 : N_NEW;
        a.u.add.ignore_eos = true;
        a.u.add.use_cache = true;
        send_msg(sock, &a);
    }
    ifd_wire_msg_t c = {.type = IFD_WIRE_CANCEL};
    c.u.cancel.id = N_REQ + 1;
    send_msg(sock, &c);

    int32_t got[N_REQ + 1][N_NEW];
    int n_got[N_REQ + 1] = {0};
    int finished = 0;
    uint32_t reasons[N_REQ + 1];
    while (finished < N_REQ + 1) {
        ck_assert_int_eq(read_msg(sock, &rd, &msg), 1);
        if (msg.type == IFD_WIRE_TOKENS) {
            for (uint32_t e = 0; e < msg.u.tokens.n_events; e++) {
                int i = (int)msg.u.tokens.events[e].id - 1;
                ck_assert(i >= 0 && i <= N_REQ);
                if (n_got[i] < N_NEW)
                    got[i][n_got[i]] = msg.u.tokens.events[e].token;
                n_got[i]++;
            }
        } else if (msg.type == IFD_WIRE_FINISHED) {
            int i = (int)msg.u.finished.id - 1;
            reasons[i] = msg.u.finished.reason;
            ck_assert_uint_eq(msg.u.finished.completion_tokens, (uint32_t)n_got[i]);
            ck_assert_uint_eq(msg.u.finished.prompt_tokens, (uint32_t)plen[i]);
            finished++;
        } else {
            ck_abort_msg("unexpected %s frame", ifd_wire_type_name(msg.type));
        }
        ifd_wire_msg_free(&msg);
    }
    for (int i = 0; i < N_REQ; i++) {
        ck_assert_uint_eq(reasons[i], IFD_WIRE_FINISH_LENGTH);
        ck_assert_int_eq(n_got[i], N_NEW);
        for (int t = 0; t < N_NEW; t++)
            ck_assert_msg(got[i][t] == ref[i][t], "request %d token %d: %d vs %d", i, t,
                          got[i][t], ref[i][t]);
    }
    ck_assert_uint_eq(reasons[N_REQ], IFD_WIRE_FINISH_CANCELLED);

    ifd_wire_msg_t sr = {.type = IFD_WIRE_STATS_REQ};
    sr.u.stats_req.seq = 9;
    send_msg(sock, &sr);
    ck_assert_int_eq(read_msg(sock, &rd, &msg), 1);
    ck_assert_int_eq(msg.type, IFD_WIRE_STATS);
    ck_assert_uint_eq(msg.u.stats.seq, 9);
    ck_assert_uint_eq(msg.u.stats.running, 0);
    ck_assert_uint_ge(msg.u.stats.decode_tokens, (uint64_t)(N_REQ * (N_NEW - 1)));
    ifd_wire_msg_free(&msg);

    ifd_wire_msg_t sd = {.type = IFD_WIRE_SHUTDOWN};
    send_msg(sock, &sd);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ifd_kvpool_stats_t st;
    ck_assert_int_eq(ifd_kvpool_stats(pool, &st), 0);
    ck_assert_int_eq(st.in_use, 0);
    ck_assert_int_gt(st.cached, 0); /* finished prompts' full blocks were published */
    ck_assert_int_eq(ifd_kvpool_check(pool, err, sizeof err), 0);

    ifd_wire_reader_close(&rd);
    close(sock);
    ifd_kvpool_destroy(pool);
    ifd_model_destroy(m);
    be->ops->destroy(be);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_worker_serve INFERD-WORKER\n");
        return 2;
    }
    worker_bin = argv[1];
    if (!ifd_test_model_path(model_path, sizeof model_path))
        ifd_test_skip("default model not found at %s (run deploy/fetch-model.sh)", model_path);
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("worker_serve");
    ifd_test_case(s, "serve", 300, IFD_TESTS(test_serve_protocol));
    return ifd_test_run(s);
}
