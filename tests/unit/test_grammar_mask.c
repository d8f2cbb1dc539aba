/*
 * test_grammar_mask.c — token masks (worker/grammar_mask.h) against brute
 * force (every token's bytes run through the matcher alone) on random
 * vocabularies and random walks through several grammars; replay from the
 * history (a resumed request) gives the same masks; the sampler only ever
 * picks allowed tokens, greedy or random.
 */
#include "testutil.h"

#include "error.h"
#include "grammar_conv.h"
#include "grammar_mask.h"
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* A random vocabulary: all single bytes that matter, then random pieces
 * over JSON-ish characters and UTF-8 fragments; token 1 is the EOS (no
 * bytes), a few tokens have no bytes. */
static ifd_vocab_t *random_vocab(uint64_t *rng, int32_t n)
{
    static const char *const atoms[] = {
        "{",  "}", "[",        "]",        "\"",   ":",    ",",    " ",    "\n",  "a",     "b", "e",
        "t",  "r", "u",        "n",        "l",    "f",    "s",    "0",    "1",   "9",     "-", ".",
        "\\", "x", "\xc3\xa9", "\xe2\x82", "\xac", "name", "true", "null", "\":", "\",\"", "  "};
    char **bytes = calloc((size_t)n, sizeof *bytes);
    uint32_t *lens = calloc((size_t)n, sizeof *lens);
    for (int32_t i = 0; i < n; i++) {
        char buf[64];
        size_t len = 0;
        if (i == 1 || i % 97 == 50) {
            len = 0; /* EOS and a few special tokens */
        } else if (i < 256 + 2 && i >= 2) {
            buf[0] = (char)(i - 2);
            len = 1;
        } else {
            int parts = 1 + (int)(rnd(rng) % 4);
            for (int p = 0; p < parts; p++) {
                const char *a = atoms[rnd(rng) % (sizeof atoms / sizeof atoms[0])];
                size_t al = strlen(a);
                if (len + al < sizeof buf) {
                    memcpy(buf + len, a, al);
                    len += al;
                }
            }
        }
        bytes[i] = malloc(len + 1);
        memcpy(bytes[i], buf, len);
        lens[i] = (uint32_t)len;
    }
    int32_t eos = 1;
    ifd_vocab_t *v;
    ck_assert_int_eq(ifd_vocab_create(n, (const char *const *)bytes, lens, &eos, 1, &v), 0);
    for (int32_t i = 0; i < n; i++)
        free(bytes[i]);
    free(bytes);
    free(lens);
    return v;
}

static char *schema_text(const char *schema)
{
    json_error_t je;
    json_t *s = json_loads(schema, JSON_DECODE_ANY, &je);
    ck_assert_ptr_nonnull(s);
    ifd_buf_t b = IFD_BUF_INIT;
    char err[256];
    ck_assert_msg(ifd_gconv_json_schema(s, &b, err, sizeof err) == 0, "%s", err);
    json_decref(s);
    return b.data;
}

static char *grammar_texts(int i)
{
    ifd_buf_t b = IFD_BUF_INIT;
    char err[256];
    switch (i) {
    case 0:
        ck_assert_int_eq(ifd_gconv_json_object(&b), 0);
        return b.data;
    case 1:
        return schema_text("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\","
                           "\"maxLength\":6},\"ok\":{\"type\":\"boolean\"},\"n\":{\"type\":"
                           "\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":3}},"
                           "\"required\":[\"name\",\"ok\"]}");
    case 2:
        ck_assert_int_eq(ifd_gconv_regex("(ab|é)+-[0-9]{1,3}", 20, &b, err, sizeof err), 0);
        return b.data;
    default: {
        const char *ch[] = {"true", "tree", "null", "nu"};
        ck_assert_int_eq(ifd_gconv_choice(ch, 4, &b, err, sizeof err), 0);
        return b.data;
    }
    }
}

START_TEST(test_mask_vs_brute_force)
{
    uint64_t rng = 99 + (uint64_t)_i;
    const int32_t V = 3000;
    ifd_vocab_t *v = random_vocab(&rng, V);
    ifd_gstore_t *st;
    ck_assert_int_eq(ifd_gstore_create(v, &st), 0);
    size_t words = ((size_t)V + 31) / 32;
    uint32_t *a = malloc(words * 4), *b = malloc(words * 4), *c = malloc(words * 4);
    for (int gi = 0; gi < 4; gi++) {
        char *text = grammar_texts(gi);
        for (int walk = 0; walk < 3; walk++) {
            ifd_constraint_t *k, *brute;
            char err[256];
            ck_assert_msg(ifd_constraint_create(st, text, strlen(text), &k, err, sizeof err) == 0,
                          "%s", err);
            ck_assert_int_eq(ifd_constraint_create(st, text, strlen(text), &brute, err, sizeof err),
                             0);
            int32_t hist[64];
            size_t n = 0;
            for (; n < 64; n++) {
                IFD_TASSERT_CMP(ifd_constraint_mask(k, hist, n, a), ==, 0);
                IFD_TASSERT_CMP(ifd_constraint_mask_brute(brute, hist, n, b), ==, 0);
                for (size_t w = 0; w < words; w++)
                    IFD_CHECK(a[w] == b[w], "grammar %d step %zu word %zu: %08x vs %08x", gi, n, w,
                              a[w], b[w]);
                /* a fresh constraint replaying the history agrees (resume) */
                if (n % 9 == 4) {
                    ifd_constraint_t *r;
                    ck_assert_int_eq(
                        ifd_constraint_create(st, text, strlen(text), &r, err, sizeof err), 0);
                    IFD_TASSERT_CMP(ifd_constraint_mask(r, hist, n, c), ==, 0);
                    IFD_TASSERT(memcmp(a, c, words * 4) == 0);
                    ifd_constraint_destroy(r);
                }
                /* pick a random allowed token; EOS ends the walk */
                int32_t allowed[4096];
                int na = 0;
                for (int32_t t = 0; t < V; t++)
                    if ((a[t >> 5] >> (t & 31)) & 1)
                        allowed[na++] = t;
                if (!na)
                    break;
                int32_t t = allowed[rnd(&rng) % (uint64_t)na];
                hist[n] = t;
                if (t == 1) {
                    n++;
                    IFD_TASSERT_CMP(ifd_constraint_mask(k, hist, n, a), ==, 0);
                    for (size_t w = 0; w < words; w++)
                        IFD_TASSERT_CMP(a[w], ==, 0);
                    break;
                }
            }
            /* a history with a token the grammar refuses is an error */
            int32_t bad[2] = {2 + '}', 2 + '}'};
            ck_assert_int_eq(ifd_constraint_mask(k, bad, 2, a), IFD_EINVAL);
            ifd_constraint_destroy(k);
            ifd_constraint_destroy(brute);
        }
        free(text);
    }
    ifd_gstore_stats_t s;
    ifd_gstore_stats(st, &s);
    ck_assert_uint_eq(s.compiles, 4);
    ck_assert_uint_gt(s.mask_hits, 0);
    free(a);
    free(b);
    free(c);
    ifd_gstore_destroy(st);
    ifd_vocab_destroy(v);
}
END_TEST

/* The sampler with a constraint: greedy and random draws only pick allowed
 * tokens, and the generated text matches the grammar. */
START_TEST(test_sampler_constraint)
{
    uint64_t rng = 5;
    const int32_t V = 2000;
    ifd_vocab_t *v = random_vocab(&rng, V);
    ifd_gstore_t *st;
    ck_assert_int_eq(ifd_gstore_create(v, &st), 0);
    ifd_sampler_t *smp;
    ck_assert_int_eq(ifd_sampler_create(V, &smp), 0);
    char *text = grammar_texts(1);
    float *logits = malloc((size_t)V * sizeof *logits);
    for (int run = 0; run < 8; run++) {
        ifd_constraint_t *k, *chk;
        char err[256];
        ck_assert_int_eq(ifd_constraint_create(st, text, strlen(text), &k, err, sizeof err), 0);
        ck_assert_int_eq(ifd_constraint_create(st, text, strlen(text), &chk, err, sizeof err), 0);
        ifd_sampling_params_t p = ifd_sampling_default_params();
        p.temperature = run % 2 ? 1.0f : 0.0f;
        p.seed = (uint64_t)run;
        p.constraint = k;
        int32_t hist[200];
        size_t n = 0;
        uint32_t mask[(2000 + 31) / 32];
        while (n < 200) {
            for (int32_t i = 0; i < V; i++)
                logits[i] = (float)((int)(rnd(&rng) % 2000) - 1000) / 100.0f;
            ifd_sampler_history_t h = {NULL, 0, hist, n};
            ifd_sample_result_t r;
            IFD_TASSERT_CMP(ifd_sampler_sample(smp, &p, logits, &h, n, &r), ==, 0);
            IFD_TASSERT_CMP(ifd_constraint_mask_brute(chk, hist, n, mask), ==, 0);
            ck_assert_msg((mask[r.token >> 5] >> (r.token & 31)) & 1, "token %d not allowed",
                          r.token);
            hist[n++] = r.token;
            if (r.token == 1)
                break;
        }
        ck_assert_msg(n < 200 && hist[n - 1] == 1, "run %d never finished", run);
        ifd_constraint_destroy(k);
        ifd_constraint_destroy(chk);
    }
    free(logits);
    free(text);
    ifd_sampler_destroy(smp);
    ifd_gstore_destroy(st);
    ifd_vocab_destroy(v);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("grammar_mask");
    TCase *tc = tcase_create("grammar_mask");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_mask_vs_brute_force, 0, 2);
    tcase_add_test(tc, test_sampler_constraint);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
