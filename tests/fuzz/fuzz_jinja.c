/*
 * fuzz_jinja.c — the Jinja interpreter (common/chat/jinja) over a template
 * and the variables it renders with, both from the input: the bytes before
 * the first 0x1e are the template, the rest a JSON object of variables (any
 * other text: no variables). Small limits (64 MiB of values, 1 s of wall
 * time, 1 MiB of output) so that libFuzzer's -timeout and -rss_limit_mb
 * (tests/fuzz/run.sh) fail any input the limits do not stop: a render that
 * loops, nests or allocates past them must end with an error in time.
 * Properties: no memory error and no crash (a deep chain or nested value is
 * an error, not a stack overflow); a refused template gives a parse code
 * (IFD_ENOTSUP, IFD_EFORMAT, IFD_ETOOBIG) and a message; a render fails only
 * with IFD_EINVAL, IFD_ENOTSUP or IFD_ETOOBIG and a message, and otherwise
 * gives NUL-terminated text within the output limit.
 */
#include "fuzz.h"

#include "chat/jinja/jinja.h"
#include "error.h"

#include <jansson.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    const uint8_t *sep = memchr(data, 0x1e, size);
    size_t tlen = sep ? (size_t)(sep - data) : size;
    char err[512];
    err[0] = '\0';
    ifd_jinja_t *t = NULL;
    int rc = ifd_jinja_parse(&t, (const char *)data, tlen, err, sizeof err);
    if (rc) {
        IFD_FUZZ_CHECK(err[0]);
        IFD_FUZZ_CHECK(rc == IFD_ENOTSUP || rc == IFD_EFORMAT || rc == IFD_ETOOBIG ||
                       rc == IFD_ENOMEM);
        return 0;
    }
    json_t *ctx = NULL;
    if (sep) {
        json_error_t je;
        ctx = json_loadb((const char *)sep + 1, size - tlen - 1, JSON_DECODE_ANY, &je);
        if (ctx && !json_is_object(ctx)) {
            json_decref(ctx);
            ctx = NULL;
        }
    }
    ifd_jinja_limits_t lim = ifd_jinja_default_limits();
    lim.max_memory = 64u << 20;
    lim.max_output = 1u << 20;
    lim.max_time_ms = 1000;
    lim.now = 1700000000;
    char *out = NULL;
    size_t len = 0;
    err[0] = '\0';
    rc = ifd_jinja_render(t, ctx, &lim, &out, &len, err, sizeof err);
    if (rc) {
        if (rc != IFD_EINVAL && rc != IFD_ENOTSUP && rc != IFD_ETOOBIG)
            fprintf(stderr, "ifd_jinja_render: %s: %s\n", ifd_err_name(rc), err);
        IFD_FUZZ_CHECK(rc == IFD_EINVAL || rc == IFD_ENOTSUP || rc == IFD_ETOOBIG);
        IFD_FUZZ_CHECK(out == NULL);
    } else {
        IFD_FUZZ_CHECK(out && len <= lim.max_output && out[len] == '\0');
    }
    free(out);
    json_decref(ctx);
    ifd_jinja_destroy(t);
    return 0;
}
