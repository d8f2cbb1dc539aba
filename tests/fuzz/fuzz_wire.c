/*
 * fuzz_wire.c — the router↔worker frame decoder (proto/wire.h): the input
 * is a byte stream fed to an ifd_wire_reader in pieces (sizes from the first
 * byte), as the supervisor and the worker read their sockets. Properties:
 * no memory error; every decoded message re-encodes, and decoding that
 * encoding gives a message that encodes to the same bytes (the codec is
 * stable); errors are negative codes with a message.
 */
#include "fuzz.h"

#include "arena.h"
#include "error.h"
#include "proto/wire.h"

#include <string.h>

static void ifd__roundtrip(const ifd_wire_msg_t *m)
{
    ifd_buf_t a = IFD_BUF_INIT, b = IFD_BUF_INIT;
    /* the encoder refuses what the decoder would: so what decoded, encodes */
    int rc = ifd_wire_encode(&a, m);
    if (rc) {
        fprintf(stderr, "re-encoding a decoded %s frame: %s\n", ifd_wire_type_name(m->type),
                ifd_err_name(rc));
        IFD_FUZZ_CHECK(rc == 0);
    }
    ifd_wire_msg_t m2;
    size_t used = 0;
    char err[256] = "";
    rc = ifd_wire_decode(a.data, a.len, &m2, &used, err, sizeof err);
    if (rc)
        fprintf(stderr, "decoding a re-encoded frame: %s\n", err);
    IFD_FUZZ_CHECK(rc == 0);
    IFD_FUZZ_CHECK(used == a.len);
    IFD_FUZZ_CHECK(ifd_wire_encode(&b, &m2) == 0);
    IFD_FUZZ_CHECK(b.len == a.len && memcmp(a.data, b.data, a.len) == 0);
    ifd_wire_msg_free(&m2);
    ifd_buf_free(&a);
    ifd_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t piece = data[0] ? data[0] : size;
    const uint8_t *in = data + 1;
    size_t len = size - 1;
    ifd_wire_reader_t r;
    ifd_wire_reader_init(&r, 1u << 20);
    for (size_t off = 0; off < len;) {
        size_t k = len - off < piece ? len - off : piece;
        int rc = ifd_wire_reader_feed(&r, in + off, k);
        off += k;
        if (rc < 0)
            break;
        for (;;) {
            ifd_wire_msg_t m;
            rc = ifd_wire_reader_next_msg(&r, &m);
            if (rc == 0)
                break;
            if (rc < 0) {
                IFD_FUZZ_CHECK(ifd_wire_reader_error(&r)[0] != '\0');
                if (r.err)
                    goto out; /* framing lost: the peer is killed */
                continue;
            }
            ifd__roundtrip(&m);
            ifd_wire_msg_free(&m);
        }
    }
out:
    ifd_wire_reader_close(&r);
    return 0;
}
