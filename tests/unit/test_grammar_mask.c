/*
 * test_grammar_mask.c — token masks (common/grammar/grammar_mask.h) against brute
 * force (every token's bytes run through the matcher alone) on random
 * vocabularies and random walks through several grammars; replay from the
 * history (a resumed request) gives the same masks; the sampler only ever
 * picks allowed tokens, greedy or random, and with top-k, top-p and min-p
 * set its filters act on the allowed tokens alone; numeric schema bounds hold
 * on every text a walk under the mask finishes; every string a walk writes
 * under a format's grammar passes the output check's format (the grammar's
 * formats are subsets of the check's); frame masks (precomputed in the
 * vocabulary, made per grammar, keyed within a horizon) give the same masks
 * as brute force, and one made for a character class never serves another.
 */
#include "testutil.h"

#include "error.h"
#include "grammar/grammar.h"
#include "grammar/grammar_conv.h"
#include "grammar/grammar_impl.h"
#include "grammar/grammar_mask.h"
#include "grammar/schema_check.h"
#include "worker/sampler.h"

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
 * bytes), a few tokens have no bytes. With keep, each token's bytes and
 * length are handed to the caller (free_bytes). */
static ifd_vocab_t *random_vocab_bytes(uint64_t *rng, int32_t n, char ***keep, uint32_t **keep_lens)
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
    if (keep) {
        *keep = bytes;
        *keep_lens = lens;
        return v;
    }
    for (int32_t i = 0; i < n; i++)
        free(bytes[i]);
    free(bytes);
    free(lens);
    return v;
}

static ifd_vocab_t *random_vocab(uint64_t *rng, int32_t n)
{
    return random_vocab_bytes(rng, n, NULL, NULL);
}

static void free_bytes(char **bytes, uint32_t *lens, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        free(bytes[i]);
    free(bytes);
    free(lens);
}

static char *schema_text(const char *schema)
{
    json_error_t je;
    json_t *s = json_loads(schema, JSON_DECODE_ANY, &je);
    ck_assert_ptr_nonnull(s);
    ifd_buf_t b = IFD_BUF_INIT;
    char err[256];
    ck_assert_msg(ifd_gconv_json_schema(s, &b, NULL, err, sizeof err) == 0, "%s", err);
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
        ck_assert_int_eq(ifd_gconv_regex("(ab|é)+-[0-9]{1,3}", 20, &b, NULL, err, sizeof err), 0);
        return b.data;
    default: {
        const char *ch[] = {"true", "tree", "null", "nu"};
        ck_assert_int_eq(ifd_gconv_choice(ch, 4, &b, NULL, err, sizeof err), 0);
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

/* Numeric bounds through the mask: random walks over a random vocabulary under
 * schemas with bounds and multipleOf; at every step the trie mask equals brute
 * force, and every finished text is a JSON number inside the bounds (checked
 * here with strtod / strtoll, independently of the grammar). */
typedef struct {
    const char *schema;
    double lo, hi;  /* inclusive range the value must fall in */
    bool lo_ex;     /* lo excluded */
    long long mult; /* 0: none; else an integer multiple of it */
} bound_case_t;

START_TEST(test_mask_schema_bounds)
{
    static const bound_case_t cases[] = {
        {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":345}", -12, 345, false, 0},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}", 0, 1, true, 0},
        /* the remainder automaton has no digit limit */
        {"{\"type\":\"integer\",\"multipleOf\":7,\"minimum\":0}", 0, 1e300, false, 7},
        {"{\"type\":\"integer\",\"exclusiveMaximum\":-3}", -1e16, -4, false, 0},
        {"{\"type\":\"number\",\"minimum\":-2,\"maximum\":-1}", -2, -1, false, 0},
        /* fractional bounds, exact */
        {"{\"type\":\"number\",\"minimum\":0.0001,\"maximum\":0.1}", 0.0001, 0.1, false, 0},
        {"{\"type\":\"number\",\"exclusiveMinimum\":-1.5,\"maximum\":2.375}", -1.5, 2.375, true, 0},
    };
    uint64_t rng = 7;
    const int32_t V = 3000;
    char **bytes;
    uint32_t *lens;
    ifd_vocab_t *v = random_vocab_bytes(&rng, V, &bytes, &lens);
    ifd_gstore_t *st;
    ck_assert_int_eq(ifd_gstore_create(v, &st), 0);
    size_t words = ((size_t)V + 31) / 32;
    uint32_t *a = malloc(words * 4), *b = malloc(words * 4);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        char *text = schema_text(cases[ci].schema);
        int finished = 0;
        for (int walk = 0; walk < 20; walk++) {
            ifd_constraint_t *k, *brute;
            char err[256];
            ck_assert_int_eq(ifd_constraint_create(st, text, strlen(text), &k, err, sizeof err), 0);
            ck_assert_int_eq(ifd_constraint_create(st, text, strlen(text), &brute, err, sizeof err),
                             0);
            int32_t hist[48];
            char out[512];
            size_t n = 0, len = 0;
            bool done = false;
            for (; n < 48 && !done; n++) {
                IFD_TASSERT_CMP(ifd_constraint_mask(k, hist, n, a), ==, 0);
                IFD_TASSERT_CMP(ifd_constraint_mask_brute(brute, hist, n, b), ==, 0);
                IFD_TASSERT(memcmp(a, b, words * 4) == 0);
                int32_t allowed[4096];
                int na = 0;
                for (int32_t t = 0; t < V; t++)
                    if ((a[t >> 5] >> (t & 31)) & 1)
                        allowed[na++] = t;
                IFD_TASSERT(na > 0);
                bool eos_ok = (a[0] >> 1) & 1;
                int32_t t = eos_ok && rnd(&rng) % 3 == 0 ? 1 : allowed[rnd(&rng) % (uint64_t)na];
                hist[n] = t;
                done = t == 1;
                if (!done && len + lens[t] < sizeof out) {
                    memcpy(out + len, bytes[t], lens[t]);
                    len += lens[t];
                }
            }
            ifd_constraint_destroy(k);
            ifd_constraint_destroy(brute);
            if (!done)
                continue;
            finished++;
            out[len] = '\0';
            char *end;
            double x = strtod(out, &end);
            IFD_CHECK(*end == '\0' && len > 0, "%s: '%s' is not a number", cases[ci].schema, out);
            IFD_CHECK(x >= cases[ci].lo && x <= cases[ci].hi && !(cases[ci].lo_ex && x == cases[ci].lo),
                      "%s: %s out of bounds", cases[ci].schema, out);
            if (cases[ci].mult) { /* the remainder digit by digit: any length */
                long long rem = 0;
                const char *d = out + (out[0] == '-');
                for (; *d >= '0' && *d <= '9'; d++)
                    rem = (rem * 10 + (*d - '0')) % cases[ci].mult;
                IFD_CHECK(*d == '\0' && rem == 0, "%s: %s not a multiple", cases[ci].schema, out);
            }
        }
        IFD_CHECK(finished >= 5, "%s: only %d walks finished", cases[ci].schema, finished);
        free(text);
    }
    free(a);
    free(b);
    ifd_gstore_destroy(st);
    ifd_vocab_destroy(v);
    free_bytes(bytes, lens, V);
}
END_TEST

/* The router compiles a grammar once and hands the worker its words
 * (ifd_grammar_serialize → ADD → ifd_constraint_create_compiled): the
 * masks are those of the grammar compiled from its text, step by step; and
 * words corrupted anywhere are refused with IFD_EFORMAT or give a grammar
 * whose masks stay within the store's limits — never a crash. */
START_TEST(test_compiled_handoff)
{
    uint64_t rng = 7;
    const int32_t V = 2000;
    ifd_vocab_t *v = random_vocab(&rng, V);
    ifd_gstore_t *st;
    ck_assert_int_eq(ifd_gstore_create(v, &st), 0);
    size_t words = ((size_t)V + 31) / 32;
    uint32_t *a = malloc(words * 4), *b = malloc(words * 4);
    char err[256];
    for (int gi = 0; gi < 4; gi++) {
        char *text = grammar_texts(gi);
        ifd_grammar_t *g;
        ck_assert_int_eq(ifd_grammar_compile(text, strlen(text), &g, err, sizeof err), 0);
        int32_t *w;
        size_t nw;
        ck_assert_int_eq(ifd_grammar_serialize(g, &w, &nw), 0);
        ifd_grammar_destroy(g);
        ifd_constraint_t *kt, *kc;
        ck_assert_int_eq(ifd_constraint_create(st, text, strlen(text), &kt, err, sizeof err), 0);
        ck_assert_msg(ifd_constraint_create_compiled(st, w, nw, &kc, err, sizeof err) == 0, "%s",
                      err);
        int32_t hist[48];
        for (size_t n = 0; n < 48; n++) {
            IFD_TASSERT_CMP(ifd_constraint_mask(kt, hist, n, a), ==, 0);
            IFD_TASSERT_CMP(ifd_constraint_mask(kc, hist, n, b), ==, 0);
            IFD_TASSERT(memcmp(a, b, words * 4) == 0);
            int32_t allowed[2048];
            int na = 0;
            for (int32_t t = 0; t < V; t++)
                if ((a[t >> 5] >> (t & 31)) & 1)
                    allowed[na++] = t;
            if (!na || (hist[n] = allowed[rnd(&rng) % (uint64_t)na]) == 1)
                break;
        }
        ifd_constraint_destroy(kt);
        ifd_constraint_destroy(kc);
        /* corruption: one word at a time, anywhere */
        for (int k = 0; k < 300; k++) {
            int32_t *x = malloc(nw * sizeof *x);
            memcpy(x, w, nw * sizeof *x);
            size_t at = rnd(&rng) % nw;
            x[at] = k % 3 ? (int32_t)rnd(&rng) : x[at] + (k % 2 ? 1 : -1);
            size_t n2 = k % 7 ? nw : nw - 1 - rnd(&rng) % 4;
            ifd_constraint_t *kx;
            int rc = ifd_constraint_create_compiled(st, x, n2, &kx, err, sizeof err);
            if (rc == 0) {
                int32_t h0[1] = {0};
                int mrc = ifd_constraint_mask(kx, h0, 0, a);
                IFD_TASSERT(mrc == 0 || mrc == IFD_ETOOBIG || mrc == IFD_EINVAL);
                ifd_constraint_destroy(kx);
            } else { /* (words that load may make a first step over the limits) */
                IFD_TASSERT(rc == IFD_EFORMAT || rc == IFD_ETOOBIG);
            }
            free(x);
        }
        free(w);
        free(text);
    }
    free(a);
    free(b);
    ifd_gstore_destroy(st);
    ifd_vocab_destroy(v);
}
END_TEST

/* One step of a constrained sampling run: fresh random logits, a draw with
 * params p after the history hist[0..n), and chk's brute-force mask of that
 * history (left in mask), which must allow the drawn token. */
static int32_t draw_allowed(ifd_sampler_t *smp, const ifd_sampling_params_t *p, float *logits,
                            int32_t V, uint64_t *rng, const int32_t *hist, size_t n,
                            ifd_constraint_t *chk, uint32_t *mask)
{
    for (int32_t i = 0; i < V; i++)
        logits[i] = (float)((int)(rnd(rng) % 2000) - 1000) / 100.0f;
    ifd_sampler_history_t h = {NULL, 0, hist, n};
    ifd_sample_result_t r;
    IFD_TASSERT_CMP(ifd_sampler_sample(smp, p, logits, &h, n, &r), ==, 0);
    IFD_TASSERT_CMP(ifd_constraint_mask_brute(chk, hist, n, mask), ==, 0);
    ck_assert_msg((mask[r.token >> 5] >> (r.token & 31)) & 1, "step %zu: token %d not allowed",
                  n, r.token);
    return r.token;
}
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
            const int32_t t = draw_allowed(smp, &p, logits, V, &rng, hist, n, chk, mask);
            hist[n++] = t;
            if (t == 1)
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

/* Truncation and a constraint together: with temperature, top-k, top-p and
 * min-p all set, every draw is a token the mask allows and one that
 * survives the three filters applied to the allowed tokens only (sampler.h
 * step 3b comes before 6); each run ends with EOS and its bytes are a
 * sentence of the grammar (and, for the schema, a JSON object with the
 * required keys). Six seeds, two grammars. */
START_TEST(test_sampler_constraint_truncated)
{
    uint64_t rng = 17;
    const int32_t V = 2000;
    char **tb;
    uint32_t *tl;
    ifd_vocab_t *v = random_vocab_bytes(&rng, V, &tb, &tl);
    ifd_gstore_t *st;
    ck_assert_int_eq(ifd_gstore_create(v, &st), 0);
    ifd_sampler_t *smp;
    ck_assert_int_eq(ifd_sampler_create(V, &smp), 0);
    float *logits = malloc((size_t)V * sizeof *logits);
    double *w = malloc((size_t)V * sizeof *w);
    const float T = 0.7f, top_p = 0.9f, min_p = 0.3f;
    const int32_t top_k = 6;
    for (int run = 0; run < 6; run++) {
        const int gi = run % 2 ? 2 : 1; /* the schema object, the regex */
        char *text = grammar_texts(gi);
        ifd_constraint_t *k, *chk;
        char err[256];
        ck_assert_int_eq(ifd_constraint_create(st, text, strlen(text), &k, err, sizeof err), 0);
        ck_assert_int_eq(ifd_constraint_create(st, text, strlen(text), &chk, err, sizeof err), 0);
        ifd_sampling_params_t p = ifd_sampling_default_params();
        p.temperature = T;
        p.top_k = top_k;
        p.top_p = top_p;
        p.min_p = min_p;
        p.seed = 1000 + (uint64_t)run;
        p.constraint = k;
        int32_t hist[400];
        size_t n = 0;
        uint32_t mask[(2000 + 31) / 32];
        while (n < 400) {
            const int32_t t = draw_allowed(smp, &p, logits, V, &rng, hist, n, chk, mask);
            /* the filters over the allowed tokens (s = l / T, w = exp(s - max)) */
            float m = -INFINITY;
            for (int32_t i = 0; i < V; i++)
                if ((mask[i >> 5] >> (i & 31)) & 1 && logits[i] / T > m)
                    m = logits[i] / T;
            int above = 0; /* survivors of min-p strictly above t, for top-k */
            for (int32_t i = 0; i < V; i++) {
                bool ok = (mask[i >> 5] >> (i & 31)) & 1;
                w[i] = ok ? exp((double)(logits[i] / T - m)) : 0.0;
                if (w[i] < min_p)
                    w[i] = 0.0; /* min-p drops it */
                if (w[i] > 0 && logits[i] / T > logits[t] / T)
                    above++;
            }
            ck_assert_msg(exp((double)(logits[t] / T - m)) >= min_p * (1 - 1e-5),
                          "run %d step %zu: token %d under min-p", run, n, t);
            ck_assert_msg(above < top_k, "run %d step %zu: token %d has %d allowed above it", run,
                          n, t, above);
            /* top-p over the top-k survivors: the mass strictly above t is under top_p */
            double kth = INFINITY, q = 0, q_above = 0;
            {
                int cnt = 0; /* the k-th largest surviving s, with multiplicity */
                float prev = INFINITY;
                while (cnt < top_k) {
                    float best = -INFINITY;
                    int nb = 0;
                    for (int32_t i = 0; i < V; i++)
                        if (w[i] > 0 && logits[i] / T < prev) {
                            if (logits[i] / T > best) {
                                best = logits[i] / T;
                                nb = 1;
                            } else if (logits[i] / T == best) {
                                nb++;
                            }
                        }
                    if (nb == 0)
                        break;
                    cnt += nb;
                    prev = best;
                    kth = best;
                }
            }
            for (int32_t i = 0; i < V; i++)
                if (w[i] > 0 && logits[i] / T >= kth) {
                    q += w[i];
                    if (logits[i] / T > logits[t] / T)
                        q_above += w[i];
                }
            ck_assert_msg(logits[t] / T == m || q_above < top_p * q * (1 + 1e-5),
                          "run %d step %zu: token %d outside top-p (%g of %g above it)", run, n, t,
                          q_above, q);
            hist[n++] = t;
            if (t == 1)
                break;
        }
        ck_assert_msg(n < 400 && hist[n - 1] == 1, "run %d never finished", run);
        /* the bytes before EOS are a whole sentence of the grammar */
        ifd_buf_t out = IFD_BUF_INIT;
        for (size_t i = 0; i + 1 < n; i++)
            ck_assert_int_eq(ifd_buf_append(&out, tb[hist[i]], tl[hist[i]]), 0);
        ifd_grammar_t *g;
        ck_assert_msg(ifd_grammar_compile(text, strlen(text), &g, err, sizeof err) == 0, "%s", err);
        ifd_gmatch_t *gm;
        ck_assert_int_eq(ifd_gmatch_create(g, &gm), 0);
        ck_assert_msg(ifd_gmatch_accept(gm, out.data, out.len) == 0 && ifd_gmatch_can_end(gm),
                      "run %d: output %.*s is not a sentence", run, (int)out.len, out.data);
        if (gi == 1) {
            json_error_t je;
            json_t *doc = json_loadb(out.data, out.len, 0, &je);
            ck_assert_msg(doc && json_is_object(doc) &&
                              json_is_string(json_object_get(doc, "name")) &&
                              json_is_boolean(json_object_get(doc, "ok")),
                          "run %d: %.*s", run, (int)out.len, out.data);
            json_decref(doc);
        }
        ifd_gmatch_destroy(gm);
        ifd_grammar_destroy(g);
        ifd_buf_free(&out);
        ifd_constraint_destroy(k);
        ifd_constraint_destroy(chk);
        free(text);
    }
    free(w);
    free(logits);
    free_bytes(tb, tl, V);
    ifd_sampler_destroy(smp);
    ifd_gstore_destroy(st);
    ifd_vocab_destroy(v);
}
END_TEST

/* A format's grammar against the check (schema_check.h): random byte-level
 * walks under the mask, each finished string checked. The grammar writes a
 * subset of what the check accepts; a string it writes that the check
 * refused would be a false 500 (docs/structured-outputs.md). */
START_TEST(test_mask_format_walks)
{
    static const char *const formats[] = {
        "date", "time",          "date-time",     "duration",     "uuid",
        "ipv4", "ipv6",          "hostname",      "email",        "uri",
        "uri-reference", "iri",  "iri-reference", "json-pointer", "relative-json-pointer",
        "regex", "idn-email",    "idn-hostname",  "uri-template"};
    enum { V = 257, EOS = 256, WALKS = 400, STEPS = 400 };
    char *bytes[V];
    uint32_t lens[V];
    for (int i = 0; i < V; i++) {
        bytes[i] = malloc(2);
        bytes[i][0] = (char)i;
        lens[i] = i == EOS ? 0 : 1;
    }
    int32_t eos = EOS;
    ifd_vocab_t *v;
    ck_assert_int_eq(ifd_vocab_create(V, (const char *const *)bytes, lens, &eos, 1, &v), 0);
    ifd_gstore_t *st;
    ck_assert_int_eq(ifd_gstore_create(v, &st), 0);
    uint64_t rng = 29;
    uint32_t mask[(V + 31) / 32];
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
        char sch[96];
        snprintf(sch, sizeof sch, "{\"type\":\"string\",\"format\":\"%s\"}", formats[f]);
        json_error_t je;
        json_t *schema = json_loads(sch, 0, &je);
        char *text = schema_text(sch);
        int finished = 0;
        for (int walk = 0; walk < WALKS; walk++) {
            ifd_constraint_t *k;
            char err[256];
            ck_assert_int_eq(ifd_constraint_create(st, text, strlen(text), &k, err, sizeof err), 0);
            int32_t hist[STEPS];
            char out[STEPS + 1];
            size_t n = 0;
            bool done = false;
            for (; n < STEPS && !done; n++) {
                IFD_TASSERT_CMP(ifd_constraint_mask(k, hist, n, mask), ==, 0);
                int32_t allowed[V];
                int na = 0;
                for (int32_t t = 0; t < V; t++)
                    if ((mask[t >> 5] >> (t & 31)) & 1)
                        allowed[na++] = t;
                IFD_TASSERT(na > 0);
                bool quote_ok = (mask['"' >> 5] >> ('"' & 31)) & 1;
                /* the closing quote now and then, so the strings stay short */
                int32_t t = quote_ok && n > 0 && rnd(&rng) % 8 == 0
                                ? '"'
                                : allowed[rnd(&rng) % (uint64_t)na];
                hist[n] = t;
                done = t == EOS;
                out[n] = (char)t;
            }
            ifd_constraint_destroy(k);
            if (!done)
                continue;
            finished++;
            char why[256];
            int rc = ifd_schema_check_text(schema, out, n - 1, why, sizeof why);
            IFD_CHECK(rc == 0, "format %s: the grammar wrote %.*s, the check says %s", formats[f],
                      (int)(n - 1), out, why);
        }
        IFD_CHECK(finished >= WALKS / 2, "format %s: only %d walks finished", formats[f], finished);
        free(text);
        json_decref(schema);
    }
    ifd_gstore_destroy(st);
    ifd_vocab_destroy(v);
    for (int i = 0; i < V; i++)
        free(bytes[i]);
}
END_TEST

/* The loose conversion's tighter readings (grammar_conv_schema.c: contains
 * as that many items of its schema, if/then/else as anyOf [allOf [if,
 * then], else]) against the check: on schemas where they are exact (no
 * maxContains; an else that excludes the if), every string a random walk
 * under the mask finishes passes ifd_schema_check. Leaving contains out,
 * or then without its if, lets walks write [true, 1] or {"k":"b","x":1}. */
START_TEST(test_mask_tight_walks)
{
    static const char *const schemas[] = {
        "{\"type\":\"array\",\"items\":{\"type\":[\"integer\",\"boolean\"],\"minimum\":-99,"
        "\"maximum\":99},\"contains\":{\"type\":\"integer\",\"minimum\":5},\"minContains\":2}",
        "{\"type\":\"array\",\"items\":{\"type\":[\"integer\",\"boolean\",\"null\"],\"minimum\":0,"
        "\"maximum\":50},\"contains\":{\"type\":\"boolean\"}}",
        "{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"a\",\"b\"]},\"x\":{\"type\":"
        "\"integer\",\"minimum\":-9,\"maximum\":9},\"y\":{\"type\":\"boolean\"}},\"required\":["
        "\"k\"],\"additionalProperties\":"
        "false,\"if\":{\"properties\":{\"k\":{\"const\":\"a\"}}},\"then\":{\"required\":[\"x\"]},"
        "\"else\":{\"properties\":{\"k\":{\"const\":\"b\"}},\"required\":[\"y\"]}}",
        /* maxContains with a plain complement (a type; the items' enum less a const),
         * and lengths beside contains: the automaton over (matches, items) */
        "{\"type\":\"array\",\"items\":{\"type\":[\"integer\",\"boolean\"],\"minimum\":0,"
        "\"maximum\":9},\"contains\":{\"type\":\"boolean\"},\"minContains\":1,\"maxContains\":2,"
        "\"maxItems\":5}",
        "{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",1]},\"contains\":{\"const\":"
        "\"a\"},\"maxContains\":1,\"minItems\":2}",
        "{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99},"
        "\"contains\":{\"minimum\":50},\"minContains\":2,\"minItems\":3,\"maxItems\":4}",
        /* if with only then, and an if requiring its key with only else: "not if"
         * written as the discriminator's other values */
        "{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"a\",\"b\",\"c\"]},\"x\":{\"type\":"
        "\"integer\",\"minimum\":0,\"maximum\":9}},\"additionalProperties\":false,\"if\":{"
        "\"properties\":{\"k\":{\"const\":\"a\"}}},\"then\":{\"required\":[\"x\"]}}",
        "{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"a\",\"b\",\"c\"]},\"y\":{\"type\":"
        "\"boolean\"}},\"additionalProperties\":false,\"if\":{\"properties\":{\"k\":{\"enum\":["
        "\"a\",\"b\"]}},\"required\":[\"k\"]},\"else\":{\"required\":[\"y\"]}}",
    };
    enum { V = 257, EOS = 256, WALKS = 150, STEPS = 300 };
    char *bytes[V];
    uint32_t lens[V];
    for (int i = 0; i < V; i++) {
        bytes[i] = malloc(2);
        bytes[i][0] = (char)i;
        lens[i] = i == EOS ? 0 : 1;
    }
    int32_t eos = EOS;
    ifd_vocab_t *v;
    ck_assert_int_eq(ifd_vocab_create(V, (const char *const *)bytes, lens, &eos, 1, &v), 0);
    ifd_gstore_t *st;
    ck_assert_int_eq(ifd_gstore_create(v, &st), 0);
    uint64_t rng = 29;
    uint32_t mask[(V + 31) / 32];
    for (size_t f = 0; f < sizeof schemas / sizeof schemas[0]; f++) {
        json_error_t je;
        json_t *schema = json_loads(schemas[f], 0, &je);
        ck_assert_ptr_nonnull(schema);
        ifd_buf_t b = IFD_BUF_INIT;
        char err[256];
        bool approx = false;
        ck_assert_msg(ifd_gconv_json_schema_loose(schema, &b, NULL, &approx, err, sizeof err) == 0,
                      "%s", err);
        ck_assert(approx);
        int finished = 0;
        for (int walk = 0; walk < WALKS; walk++) {
            ifd_constraint_t *k;
            ck_assert_int_eq(ifd_constraint_create(st, b.data, b.len, &k, err, sizeof err), 0);
            int32_t hist[STEPS];
            char out[STEPS + 1];
            size_t n = 0;
            bool done = false;
            for (; n < STEPS && !done; n++) {
                IFD_TASSERT_CMP(ifd_constraint_mask(k, hist, n, mask), ==, 0);
                int32_t allowed[V];
                int na = 0;
                for (int32_t t = 0; t < V; t++)
                    if ((mask[t >> 5] >> (t & 31)) & 1 && t != ' ' && t != '\n' && t != '\t' &&
                        t != '\r')
                        allowed[na++] = t;
                IFD_TASSERT(na > 0);
                /* an end (or the item separator) now and then, so the values stay short */
                int32_t t = allowed[rnd(&rng) % (uint64_t)na];
                for (const char *e = "]},"; *e && rnd(&rng) % 3 == 0; e++)
                    if ((mask[*e >> 5] >> (*e & 31)) & 1) {
                        t = *e;
                        break;
                    }
                hist[n] = t;
                done = t == EOS;
                out[n] = (char)t;
            }
            ifd_constraint_destroy(k);
            if (!done)
                continue;
            finished++;
            char why[256];
            int rc = ifd_schema_check_text(schema, out, n - 1, why, sizeof why);
            IFD_CHECK(rc == 0, "schema %zu: the grammar wrote %.*s, the check says %s", f,
                      (int)(n - 1), out, why);
        }
        IFD_CHECK(finished >= WALKS / 2, "schema %zu: only %d walks finished", f, finished);
        ifd_buf_free(&b);
        json_decref(schema);
    }
    ifd_gstore_destroy(st);
    ifd_vocab_destroy(v);
    for (int i = 0; i < V; i++)
        free(bytes[i]);
}
END_TEST

/* ---- frame masks (grammar_mask.h) ---------------------------------------------------- */

/* The fast mask equals brute force at every step of a random walk of up to
 * `steps` tokens under `text` (strings stay open: the closing quote is
 * drawn only now and then), from constraint k. */
static void walk_vs_brute(ifd_gstore_t *st, const char *text, int32_t V, uint64_t *rng, int steps,
                          const char *what)
{
    size_t words = ((size_t)V + 31) / 32;
    uint32_t *a = malloc(words * 4), *b = malloc(words * 4);
    int32_t *allowed = malloc((size_t)V * sizeof *allowed);
    int32_t *hist = malloc((size_t)steps * sizeof *hist);
    ifd_constraint_t *k;
    char err[256];
    ck_assert_msg(ifd_constraint_create(st, text, strlen(text), &k, err, sizeof err) == 0, "%s",
                  err);
    for (int n = 0; n < steps; n++) {
        IFD_TASSERT_CMP(ifd_constraint_mask(k, hist, (size_t)n, a), ==, 0);
        IFD_TASSERT_CMP(ifd_constraint_mask_brute(k, hist, (size_t)n, b), ==, 0);
        for (size_t w = 0; w < words; w++)
            IFD_CHECK(a[w] == b[w], "%s step %d word %zu: %08x vs %08x", what, n, w, a[w], b[w]);
        int na = 0;
        for (int32_t t = 0; t < V; t++)
            if ((a[t >> 5] >> (t & 31)) & 1)
                allowed[na++] = t;
        if (!na)
            break;
        hist[n] = allowed[rnd(rng) % (uint64_t)na];
        if (hist[n] == 1) /* EOS */
            break;
    }
    ifd_constraint_destroy(k);
    free(a);
    free(b);
    free(allowed);
    free(hist);
}

/* A JSON schema's grammar, as a NUL-terminated string (free). */
static char *prewarm_schema_grammar(void)
{
    return schema_text("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},"
                       "\"b\":{\"type\":\"string\",\"maxLength\":30},\"c\":{\"type\":\"string\","
                       "\"format\":\"email\"}},\"required\":[\"a\",\"b\",\"c\"]}");
}

/* Frame masks precomputed in the vocabulary (ifd_vocab_prewarm), made per
 * grammar, and for counted repetitions (the horizon key): on random
 * vocabularies, at every step of random walks through schemas with strings of
 * every kind, the mask equals brute force, and each kind of frame mask was
 * used. */
START_TEST(test_mask_frames_vs_brute)
{
    uint64_t rng = 501 + (uint64_t)_i;
    const int32_t V = 3000;
    ifd_vocab_t *v = random_vocab(&rng, V);
    char *pg = prewarm_schema_grammar();
    const char *texts[] = {"{\"a\": \"x\\n\\u00e9y\", \"b\": \"abcdefghijklmnopqrstuvwxyzabcd\", "
                           "\"c\": \"a.b@c.example.org\"}"};
    char err[256];
    ck_assert_msg(ifd_vocab_prewarm(v, pg, strlen(pg), texts, 1, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_gt(ifd_vocab_frames(v, NULL), 0);
    free(pg);
    ifd_gstore_t *st;
    ck_assert_int_eq(ifd_gstore_create(v, &st), 0);
    static const char *const schemas[] = {
        /* the prewarmed lexemes in another document */
        "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":"
        "\"string\"},\"y\":{\"type\":\"string\",\"maxLength\":30},\"z\":{\"type\":\"string\","
        "\"format\":\"email\"}},\"required\":[\"x\",\"y\",\"z\"]}}",
        /* frames of this grammar alone: other lengths, a pattern with a count, keys */
        "{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"string\",\"pattern\":"
        "\"^([^ ]+ +){0,20}[^ ]+$\"},\"q\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":"
        "9},\"r\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"p\",\"q\","
        "\"r\"]}",
        "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\",\"format\":\"uri\"}}",
    };
    for (size_t si = 0; si < sizeof schemas / sizeof schemas[0]; si++) {
        char *text = schema_text(schemas[si]);
        for (int w = 0; w < 4; w++) {
            char what[64];
            snprintf(what, sizeof what, "schema %zu walk %d", si, w);
            walk_vs_brute(st, text, V, &rng, 60, what);
        }
        free(text);
    }
    ifd_gstore_stats_t s;
    ifd_gstore_stats(st, &s);
    ck_assert_uint_gt(s.frame_shared, 0);
    ck_assert_uint_gt(s.frame_local, 0);
    ck_assert_uint_gt(s.frame_builds, 0);
    ifd_gstore_destroy(st);
    ifd_vocab_destroy(v);
}
END_TEST

/* States with many stacks (an object of many optional properties: after
 * "{" or "," one stack per property that may come next; an anyOf of such
 * objects) are walked with a next-byte filter (a byte no stack takes is
 * refused without an advance) and interned with their shared lower nodes
 * copied once (ifd__gstate_copy). On random vocabularies, at every step of
 * random walks, repeated so that later walks run over interned states, the
 * mask equals brute force; the filter refused steps, and a state of at
 * least IFD_GWALK_FILTER_MIN stacks was met. */
START_TEST(test_mask_many_stacks_vs_brute)
{
    uint64_t rng = 901 + (uint64_t)_i;
    const int32_t V = 3000;
    ifd_vocab_t *v = random_vocab(&rng, V);
    ifd_gstore_t *st;
    ck_assert_int_eq(ifd_gstore_create(v, &st), 0);
    /* keys from the vocabulary's letters, so that random walks write them */
    static const char *const keys[] = {"a",  "b",  "e",  "t",   "r",   "u",   "n",    "l",
                                       "f",  "s",  "ab", "ba",  "ea",  "tr",  "true", "name",
                                       "nu", "ll", "fs", "abe", "bat", "rue", "sun",  "null"};
    char schema[4096];
    size_t o = 0;
    o += (size_t)snprintf(schema + o, sizeof schema - o, "{\"anyOf\":[");
    for (int variant = 0; variant < 2; variant++) {
        o += (size_t)snprintf(schema + o, sizeof schema - o, "%s{\"type\":\"object\",",
                              variant ? "," : "");
        o += (size_t)snprintf(schema + o, sizeof schema - o,
                              "\"additionalProperties\":false,\"properties\":{");
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            o += (size_t)snprintf(schema + o, sizeof schema - o, "%s\"%s%s\":{\"type\":\"%s\"}",
                                  k ? "," : "", keys[k], variant ? "x" : "",
                                  (k + (size_t)variant) % 3 ? "integer" : "boolean");
        o += (size_t)snprintf(schema + o, sizeof schema - o, "}}");
    }
    snprintf(schema + o, sizeof schema - o, "]}");
    char *text = schema_text(schema);
    /* the grammar has states of many stacks */
    ifd_grammar_t *g;
    char err[256];
    ck_assert_msg(ifd_grammar_compile(text, strlen(text), &g, err, sizeof err) == 0, "%s", err);
    ifd_gmatch_t *m;
    ck_assert_int_eq(ifd_gmatch_create(g, &m), 0);
    ck_assert_int_eq(ifd_gmatch_accept(m, "{", 1), 0);
    ck_assert_uint_ge(ifd__gmatch_state(m)->n, IFD_GWALK_FILTER_MIN);
    ifd_gmatch_destroy(m);
    ifd_grammar_destroy(g);
    for (int w = 0; w < 6; w++) {
        char what[64];
        snprintf(what, sizeof what, "many stacks walk %d", w);
        walk_vs_brute(st, text, V, &rng, 40, what);
    }
    free(text);
    ifd_gstore_stats_t s;
    ifd_gstore_stats(st, &s);
    ck_assert_uint_gt(s.filter_skips, 0);
    ifd_gstore_destroy(st);
    ifd_vocab_destroy(v);
}
END_TEST

/* byte_vocab's tokens after the 256 single bytes */
static const char *const PIECES[] = {"ab",   "az",    "zz",  "a\"", "\")",      "\"]",  "\"",
                                     "z\"]", "ab\")", "b c", "  ",  "\xc3\xa9", "q\"]x"};

/* A vocabulary of every byte and a few pieces (token 1: EOS). */
static ifd_vocab_t *byte_vocab(int32_t *n_out)
{
    const char *const *pieces = PIECES;
    enum { NP = sizeof PIECES / sizeof PIECES[0] };
    int32_t n = 258 + NP;
    char **bytes = calloc((size_t)n, sizeof *bytes);
    uint32_t *lens = calloc((size_t)n, sizeof *lens);
    for (int32_t i = 0; i < n; i++) {
        bytes[i] = malloc(8);
        if (i >= 2 && i < 258) {
            bytes[i][0] = (char)(i - 2);
            lens[i] = 1;
        } else if (i >= 258) {
            lens[i] = (uint32_t)strlen(pieces[i - 258]);
            memcpy(bytes[i], pieces[i - 258], lens[i]);
        }
    }
    int32_t eos = 1;
    ifd_vocab_t *v;
    ck_assert_int_eq(ifd_vocab_create(n, (const char *const *)bytes, lens, &eos, 1, &v), 0);
    free_bytes(bytes, lens, n);
    *n_out = n;
    return v;
}

static int32_t piece_id(const char *p)
{
    for (size_t i = 0; i < sizeof PIECES / sizeof PIECES[0]; i++)
        if (strcmp(PIECES[i], p) == 0)
            return 258 + (int32_t)i;
    return -1;
}

/* A frame mask is used only for a frame of the same class, and its tokens
 * that complete the frame are checked against the state's own continuation:
 * the vocabulary's frame of a string without 'z' (inside "( ... )") must not
 * serve a string with 'z', and serves the same string inside "[ ... ]" with
 * "]" allowed after the quote and ")" not. */
START_TEST(test_mask_frames_wrong_class)
{
    int32_t V;
    ifd_vocab_t *v = byte_vocab(&V);
    const char *no_z = "root ::= \"(\" s \")\"\ns ::= \"\\\"\" [^\"z\\x00-\\x1F]* \"\\\"\"\n";
    const char *texts[] = {"(\"ab"};
    char err[256];
    ck_assert_msg(ifd_vocab_prewarm(v, no_z, strlen(no_z), texts, 1, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_uint_gt(ifd_vocab_frames(v, NULL), 0);
    ifd_gstore_t *st;
    ck_assert_int_eq(ifd_gstore_create(v, &st), 0);
    size_t words = ((size_t)V + 31) / 32;
    uint32_t *a = malloc(words * 4), *b = malloc(words * 4);
    const int32_t hist[] = {2 + '[', 2 + '"', piece_id("ab")};
    struct {
        const char *g;
        bool z_ok, shared;
    } cases[] = {
        {"root ::= \"[\" s \"]\"\ns ::= \"\\\"\" [^\"\\x00-\\x1F]* \"\\\"\"\n", true, false},
        {"root ::= \"[\" s \"]\"\ns ::= \"\\\"\" [^\"z\\x00-\\x1F]* \"\\\"\"\n", false, true},
    };
    for (size_t ci = 0; ci < 2; ci++) {
        ifd_constraint_t *k;
        ck_assert_msg(
            ifd_constraint_create(st, cases[ci].g, strlen(cases[ci].g), &k, err, sizeof err) == 0,
            "%s", err);
        ifd_gstore_stats_t s0, s1;
        ifd_gstore_stats(st, &s0);
        IFD_TASSERT_CMP(ifd_constraint_mask(k, hist, 3, a), ==, 0);
        ifd_gstore_stats(st, &s1);
        IFD_TASSERT_CMP(ifd_constraint_mask_brute(k, hist, 3, b), ==, 0);
        IFD_TASSERT(memcmp(a, b, words * 4) == 0);
        int32_t z = 2 + 'z', zz = piece_id("zz"), close_ok = piece_id("\"]"),
                close_bad = piece_id("\")"), zclose = piece_id("z\"]");
        IFD_TASSERT_CMP((a[z >> 5] >> (z & 31)) & 1, ==, (uint32_t)cases[ci].z_ok);
        IFD_TASSERT_CMP((a[zz >> 5] >> (zz & 31)) & 1, ==, (uint32_t)cases[ci].z_ok);
        IFD_TASSERT_CMP((a[zclose >> 5] >> (zclose & 31)) & 1, ==, (uint32_t)cases[ci].z_ok);
        IFD_TASSERT_CMP((a[close_ok >> 5] >> (close_ok & 31)) & 1, ==, 1);
        IFD_TASSERT_CMP((a[close_bad >> 5] >> (close_bad & 31)) & 1, ==, 0);
        IFD_TASSERT_CMP(s1.frame_shared - s0.frame_shared, ==, (uint64_t)cases[ci].shared);
        ifd_constraint_destroy(k);
    }
    free(a);
    free(b);
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
    tcase_add_test(tc, test_mask_schema_bounds);
    tcase_add_test(tc, test_compiled_handoff);
    tcase_add_test(tc, test_sampler_constraint);
    tcase_add_test(tc, test_sampler_constraint_truncated);
    tcase_add_test(tc, test_mask_format_walks);
    tcase_add_test(tc, test_mask_tight_walks);
    tcase_add_loop_test(tc, test_mask_frames_vs_brute, 0, 2);
    tcase_add_test(tc, test_mask_frames_wrong_class);
    tcase_add_loop_test(tc, test_mask_many_stacks_vs_brute, 0, 2);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
