/*
 * test_grammar.c — the grammar compiler and matcher (common/grammar/grammar.h) and
 * the converters (common/grammar/grammar_conv.h): hand-picked sentences, compile
 * errors, regexes against PCRE2 on random strings, JSON Schemas against
 * valid and invalid instances, and random JSON documents under the
 * json_object grammar.
 */
#include "testutil.h"

#include "error.h"
#include "grammar/grammar.h"
#include "grammar/grammar_conv.h"
#include "grammar/schema_check.h"
#include "grammar/schema_json.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ifd_grammar_t *compile_ok(const char *text)
{
    char err[256];
    ifd_grammar_t *g = NULL;
    int rc = ifd_grammar_compile(text, strlen(text), &g, err, sizeof err);
    ck_assert_msg(rc == 0, "compile failed: %s\n%s", err, text);
    return g;
}

/* Whole-sentence match. */
static bool matches(const ifd_grammar_t *g, const char *s, size_t n)
{
    ifd_gmatch_t *m;
    ck_assert_int_eq(ifd_gmatch_create(g, &m), 0);
    bool ok = ifd_gmatch_accept(m, s, n) == 0 && ifd_gmatch_can_end(m);
    ifd_gmatch_destroy(m);
    return ok;
}

static bool matches_s(const ifd_grammar_t *g, const char *s)
{
    return matches(g, s, strlen(s));
}

START_TEST(test_gbnf_basics)
{
    ifd_grammar_t *g = compile_ok("root ::= \"a\" b* | [x-z]+ \"!\"?\n"
                                  "b ::= \"b\" | \"c\" # comment\n");
    ck_assert(matches_s(g, "a"));
    ck_assert(matches_s(g, "abcb"));
    ck_assert(matches_s(g, "xyz!"));
    ck_assert(matches_s(g, "z"));
    ck_assert(!matches_s(g, ""));
    ck_assert(!matches_s(g, "ab!"));
    ck_assert(!matches_s(g, "xa"));
    ifd_grammar_destroy(g);

    g = compile_ok("root ::= [0-9]{2,4} \"-\" x{3}\nx ::= [ab]\n");
    ck_assert(matches_s(g, "12-aba"));
    ck_assert(matches_s(g, "1234-bbb"));
    ck_assert(!matches_s(g, "1-aaa"));
    ck_assert(!matches_s(g, "12345-aaa"));
    ck_assert(!matches_s(g, "12-aa"));
    ifd_grammar_destroy(g);

    /* multi-line rule, groups, empty alternative, unicode, escapes */
    g = compile_ok("root ::= ( \"é\" | [α-ω] )\n"
                   "    ( \"\\n\" | \"\\x41\" | \"\\u00e9\" | )\n"
                   "    [^a-z]\n");
    ck_assert(matches_s(g, "é\nZ"));
    ck_assert(matches_s(g, "βAZ"));
    ck_assert(matches_s(g, "ωé€"));
    ck_assert(matches_s(g, "ω😀"));
    ck_assert(!matches_s(g, "ωa"));
    ck_assert(!matches_s(g, "a"));
    /* a byte prefix of a multi-byte character is a live state */
    ifd_gmatch_t *m;
    ck_assert_int_eq(ifd_gmatch_create(g, &m), 0);
    ck_assert(ifd_gmatch_check(m, "\xce", 1));
    ck_assert(!ifd_gmatch_check(m, "\xff", 1));
    ck_assert_int_eq(ifd_gmatch_accept(m, "\xce\xb2", 2), 0);
    ck_assert(!ifd_gmatch_can_end(m));
    ck_assert_int_eq(ifd_gmatch_accept(m, "Q", 1), 0);
    ck_assert(ifd_gmatch_can_end(m));
    ck_assert(ifd_gmatch_is_done(m));
    ck_assert_int_eq(ifd_gmatch_accept(m, "Q", 1), IFD_EINVAL);
    ifd_gmatch_reset(m);
    ck_assert(!ifd_gmatch_can_end(m));
    ifd_gmatch_destroy(m);
    ifd_grammar_destroy(g);

    /* right recursion runs in constant depth: a long list */
    g = compile_ok("root ::= item (\",\" item)*\nitem ::= [a-z]+\n");
    size_t n = 200000;
    char *big = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        big[i] = (i % 7 == 6) ? ',' : (char)('a' + i % 26);
    big[n - 1] = 'q';
    ck_assert(matches(g, big, n));
    free(big);
    ifd_grammar_destroy(g);
}
END_TEST

/* Issue 31 row 11: a repetition of something that can be empty (`(a?)*`,
 * `(a*)*`, what regex `a**` and `(a*)*b` become) was refused as left
 * recursion, naming an internal rule; it adds nothing to the stack, so it
 * is accepted and matches what it should. */
static ifd_grammar_t *regex_grammar(const char *re);

START_TEST(test_nullable_repetition)
{
    ifd_grammar_t *g = compile_ok("root ::= (\"a\"?)* \"b\"\n");
    ck_assert(matches_s(g, "b"));
    ck_assert(matches_s(g, "aaab"));
    ck_assert(!matches_s(g, "ba"));
    ck_assert(!matches_s(g, "aa"));
    ifd_grammar_destroy(g);
    g = compile_ok("root ::= ((\"a\"*)* | (\"x\"? \"y\"?)+) \"c\"\n");
    ck_assert(matches_s(g, "c"));
    ck_assert(matches_s(g, "aac"));
    ck_assert(matches_s(g, "xyxxyc"));
    ck_assert(!matches_s(g, "axc"));
    ifd_grammar_destroy(g);
    /* a nullable cycle through written rules */
    g = compile_ok("root ::= s \"!\"\ns ::= a s | \"\"\na ::= \"z\" | \"\"\n");
    ck_assert(matches_s(g, "!"));
    ck_assert(matches_s(g, "zzz!"));
    ck_assert(!matches_s(g, "z"));
    ifd_grammar_destroy(g);
    static const char *const res[] = {"(a*)*b", "a**", "(a?)+c", "(a|)*d"};
    static const char *const ok[] = {"aab", "", "c", "aad"};
    for (size_t i = 0; i < 4; i++) {
        g = regex_grammar(res[i]);
        ck_assert_msg(matches_s(g, ok[i]), "%s ~ %s", res[i], ok[i]);
        ck_assert_msg(!matches_s(g, "q"), "%s ~ q", res[i]);
        ifd_grammar_destroy(g);
    }
}
END_TEST

START_TEST(test_gbnf_errors)
{
    static const struct {
        const char *text, *needle;
    } cases[] = {
        {"root ::= foo\n", "undefined rule 'foo'"},
        {"start ::= \"a\"\n", "no 'root' rule"},
        {"root ::= root \"a\" | \"b\"\n", "left-recursive"},
        {"root ::= a\na ::= b? a \"x\"\nb ::= \"y\"\n", "left-recursive"},
        {"root ::= (\"a\"? root \"b\")* \"c\"\n", "rule 'root' is left-recursive"},
        {"root ::= \"abc\n", "unterminated"},
        {"root ::= [ab", "unterminated"},
        {"root ::= [z-a]\n", "reversed"},
        {"root ::= \"a\" )\n", "unexpected ')'"},
        {"root ::= \"a\" $\n", "unexpected character"},
        {"root ::= \"a\"{3,2}\n", "max below min"},
        {"root ::= \"a\"{99999}\n", "repetition count"},
        {"root ::= \"\\q\"\n", "unknown escape"},
        {"root ::= \"a\"\nroot ::= \"b\"\n", "defined twice"},
        /* no finite text: every way through root must reference a again */
        {"root ::= a\na ::= \"x\" a\n", "matches no text"},
        {"root ::= \"[\" (a | \"b\" root) \"]\"\na ::= \"(\" a \")\"\n", "matches no text"},
        {"just text\n", "expected a rule"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256];
        ifd_grammar_t *g = NULL;
        int rc = ifd_grammar_compile(cases[i].text, strlen(cases[i].text), &g, err, sizeof err);
        ck_assert_msg(rc != 0, "accepted: %s", cases[i].text);
        ck_assert_ptr_null(g);
        ck_assert_msg(strstr(err, cases[i].needle), "'%s' → '%s'", cases[i].text, err);
    }
}
END_TEST

static ifd_grammar_t *regex_grammar(const char *re)
{
    ifd_buf_t b = IFD_BUF_INIT;
    char err[256];
    int rc = ifd_gconv_regex(re, strlen(re), &b, NULL, err, sizeof err);
    ck_assert_msg(rc == 0, "regex %s: %s", re, err);
    ifd_grammar_t *g = compile_ok(b.data);
    ifd_buf_free(&b);
    return g;
}

/* Random strings over a small alphabet: the grammar accepts exactly what
 * PCRE2 matches in full. */
START_TEST(test_regex_vs_pcre2)
{
    static const char *const res[] = {
        "a",
        "ab|ba",
        "a*b+",
        "(ab)?c{2,3}",
        "[a-c]+-?[0-9]{1,2}",
        "[^ab]",
        "\\d+\\.\\d*",
        "(?:a|bc)*",
        "x{0,2}y{1,}",
        ".",
        "a.b",
        "\\w\\W\\s\\S",
        "[\\d_]+",
        "(a|b)(c|)",
        "^a+$",
        "(?P<n>a)b",
        "a??b+?",
        "[-a]",
        "[a\\]]+",
        "\\x61\\u0062",
        "[\\x30-\\x39\\s_]+",
        "[^\\d\\n]+",
        "[\\s\\S]+",  /* issue 31: a negated class escape inside a class */
        "[\\Da]",
        "[\\W\\d]+",
    };
    const char alpha[] = "abcxy019_-. \n]";
    uint64_t rng = 12345;
    for (size_t r = 0; r < sizeof res / sizeof res[0]; r++) {
        ifd_grammar_t *g = regex_grammar(res[r]);
        int perr;
        PCRE2_SIZE eoff;
        pcre2_code *re = pcre2_compile(
            (PCRE2_SPTR)res[r], PCRE2_ZERO_TERMINATED,
            PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_UTF | PCRE2_ALT_BSUX, &perr, &eoff, NULL);
        ck_assert_ptr_nonnull(re);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        int pos = 0;
        for (int t = 0; t < 3000; t++) {
            char s[8];
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int len = (int)((rng >> 33) % 7);
            for (int i = 0; i < len; i++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                s[i] = alpha[(rng >> 33) % (sizeof alpha - 1)];
            }
            bool want = pcre2_match(re, (PCRE2_SPTR)s, (size_t)len, 0, 0, md, NULL) >= 0;
            bool got = matches(g, s, (size_t)len);
            IFD_CHECK(want == got, "regex %s on \"%.*s\": pcre2 %d, grammar %d", res[r], len, s,
                      want, got);
            pos += want;
        }
        ck_assert_msg(pos > 0 || r == 10 || r == 11, "regex %s: no positive sample", res[r]);
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        ifd_grammar_destroy(g);
    }
    /* refused features */
    static const char *const bad[] = {"(a)\\1", "a(?=b)", "\\bword", "a++",
                                      "(?i)a",  "a$b",    "[a-\\d]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ifd_buf_t b = IFD_BUF_INIT;
        char err[256];
        ck_assert_int_eq(ifd_gconv_regex(bad[i], strlen(bad[i]), &b, NULL, err, sizeof err), IFD_ENOTSUP);
        ck_assert(strstr(err, "regex"));
        ifd_buf_free(&b);
    }
}
END_TEST

/* The escapes GBNF and the regex dialect share (one decoder, ifd__gescape)
 * and where the dialects differ: GBNF has \U and refuses \f \v and
 * non-scalar values; regexes have \f \v, refuse surrogates as unsupported,
 * and leave \U to the unsupported letters. */
START_TEST(test_escape_dialects)
{
    static const struct {
        bool regex;
        const char *text, *yes; /* yes: a sentence it takes (+ its NUL with \0) */
    } ok[] = {
        {false, "root ::= \"\\x41\\u00e9\\U0001F600\\n\\t\\0\"", "A\xc3\xa9\xf0\x9f\x98\x80\n\t"},
        {false, "root ::= [\\x30-\\x39\\-]+", "1-2"},
        {false, "root ::= \"\\\\\\\"\\[\\]\\{\\}\"", "\\\"[]{}"},
        {true, "\\f\\v\\x41\\u00e9[\\t\\n]\\.\\-", "\f\vA\xc3\xa9\t.-"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        ifd_grammar_t *g = ok[i].regex ? regex_grammar(ok[i].text) : compile_ok(ok[i].text);
        bool nul = strstr(ok[i].text, "\\0") != NULL;
        ck_assert_msg(matches(g, ok[i].yes, strlen(ok[i].yes) + nul), "%s", ok[i].text);
        ck_assert_msg(!matches_s(g, "A-"), "%s", ok[i].text);
        ifd_grammar_destroy(g);
    }
    static const struct {
        bool regex;
        const char *text, *needle;
        int rc;
    } bad[] = {
        {false, "root ::= \"\\f\"", "unknown escape '\\f'", IFD_EFORMAT},
        {false, "root ::= \"\\v\"", "unknown escape '\\v'", IFD_EFORMAT},
        {false, "root ::= \"\\x4\"", "bad hex escape", IFD_EFORMAT},
        {false, "root ::= \"\\x4", "bad hex escape", IFD_EFORMAT},
        {false, "root ::= \"\\uD800\"", "escape \\uD800 is not a Unicode scalar value",
         IFD_EFORMAT},
        {false, "root ::= \"\\U00110000\"", "escape \\U110000 is not a Unicode scalar value",
         IFD_EFORMAT},
        {true, "\\uD800", "regex: surrogate escape at offset 6", IFD_ENOTSUP},
        {true, "\\U0001F600", "regex: unsupported escape at offset 2", IFD_ENOTSUP},
        {true, "\\x4g", "regex: bad hex escape at offset 4", IFD_EFORMAT},
        {true, "[\\u12", "regex: bad hex escape at offset 5", IFD_EFORMAT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        ifd_buf_t b = IFD_BUF_INIT;
        ifd_grammar_t *g = NULL;
        const char *t = bad[i].text;
        int rc = bad[i].regex ? ifd_gconv_regex(t, strlen(t), &b, NULL, err, sizeof err)
                              : ifd_grammar_compile(t, strlen(t), &g, err, sizeof err);
        ck_assert_msg(rc == bad[i].rc && !g, "%s: %d", t, rc);
        ck_assert_msg(strstr(err, bad[i].needle), "'%s' → '%s'", t, err);
        ifd_buf_free(&b);
    }
}
END_TEST

static ifd_grammar_t *schema_grammar(const char *schema)
{
    json_error_t je;
    json_t *s = json_loads(schema, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    ck_assert_msg(s != NULL, "bad test schema %s", schema);
    ifd_buf_t b = IFD_BUF_INIT;
    char err[256];
    int rc = ifd_gconv_json_schema(s, &b, NULL, err, sizeof err);
    ck_assert_msg(rc == 0, "schema %s: %s", schema, err);
    ifd_grammar_t *g = compile_ok(b.data);
    ifd_buf_free(&b);
    json_decref(s);
    return g;
}

START_TEST(test_json_schema)
{
    static const struct {
        const char *schema;
        const char *good[6];
        const char *bad[6];
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
         "\"integer\"}},\"required\":[\"name\",\"age\"]}",
         {"{\"name\":\"Al\",\"age\":3}", "{ \"name\" : \"\\u00e9\\n\" , \"age\" : -12 }",
          "{\"name\":\"\",\"age\":0}"},
         {"{\"name\":\"Al\"}", "{\"age\":3,\"name\":\"x\"}", "{\"name\":\"a\",\"age\":1.5}",
          "{\"name\":\"a\",\"age\":01}", "{\"name\":\"a\nb\",\"age\":1}"}},
        {"{\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"null\"},\"c\":{\"enum\":"
         "[1,\"x\",[true]]}}}",
         {"{}", "{\"a\":true}", "{\"b\":null,\"c\":\"x\"}", "{\"a\":false,\"b\":null,\"c\":[true]}",
          "{\"c\":1}"},
         {"{\"c\":2}", "{\"b\":null,\"a\":true}", "{,}", "{\"a\":true,}"}},
        {"{\"type\":\"array\",\"items\":{\"type\":\"number\"},\"minItems\":2,\"maxItems\":3}",
         {"[1,2]", "[1.5e3, -0.25, 7]", "[ 0 ,1 ]"},
         {"[]", "[1]", "[1,2,3,4]", "[1,]", "[1 2]"}},
        {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
         "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]"
         "}},\"$ref\":\"#/$defs/node\"}",
         {"{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}"},
         {"{\"kids\":[]}", "{\"v\":1,\"kids\":[{}]}"}},
        {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"const\":{\"k\":[1]}}]}",
         {"\"\"", "\"ab\"", "{\"k\":[1]}"},
         {"\"abc\"", "{\"k\":[2]}", "{ \"k\":[1]}"}},
        {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}$\"}",
         {"\"AB-123\""},
         {"\"AB-12\"", "\"ab-123\"", "\"AB-1234\""}},
        {"{\"type\":\"string\",\"pattern\":\"q\\\"\"}",
         {"\"q\\\"\"", "\"xq\\\"y\""},
         {"\"q\"\"", "\"x\""}},
        {"{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"},"
         "\"t\":{\"type\":\"string\",\"format\":\"date-time\"},\"u\":{\"type\":\"string\","
         "\"format\":\"uuid\"}},\"required\":[\"d\",\"t\",\"u\"],\"additionalProperties\":false}",
         {"{\"d\":\"2024-02-28\",\"t\":\"2024-01-01T12:30:00Z\",\"u\":"
          "\"123e4567-e89b-12d3-a456-426614174000\"}",
          "{\"d\":\"1999-12-31\",\"t\":\"2024-01-01T23:59:59.123+02:00\",\"u\":"
          "\"00000000-0000-0000-0000-00000000000A\"}"},
         {"{\"d\":\"2024-13-01\",\"t\":\"2024-01-01T12:30:00Z\",\"u\":"
          "\"123e4567-e89b-12d3-a456-426614174000\"}",
          "{\"d\":\"2024-01-01\",\"t\":\"2024-01-01 12:30:00Z\",\"u\":"
          "\"123e4567-e89b-12d3-a456-426614174000\"}"}},
        /* RFC 3339 full-time: the offset is required, fractions up to 6 digits */
        {"{\"type\":\"string\",\"format\":\"time\"}",
         {"\"12:30:00Z\"", "\"00:00:00+00:00\"", "\"23:59:59.123456-05:30\"", "\"09:05:07.5Z\""},
         {"\"12:30:00\"", "\"24:00:00Z\"", "\"12:60:00Z\"", "\"12:30Z\"", "\"12:30:00.1234567Z\"",
          "\"12:30:00+2:00\""}},
        {"{\"type\":[\"integer\",\"null\"]}", {"5", "null"}, {"\"5\"", "5.5"}},
        {"{\"properties\":{\"a\":{\"const\":1},\"b\":{\"const\":2},\"c\":{\"const\":3},"
         "\"d\":{\"const\":4}},\"required\":[\"c\"]}",
         {"{\"c\":3}", "{\"a\":1,\"c\":3}", "{\"a\":1,\"b\":2,\"c\":3,\"d\":4}",
          "{\"b\":2,\"c\":3,\"d\":4}"},
         {"{}", "{\"a\":1}", "{\"a\":1,\"c\":3,}", "{\"c\":3,\"a\":1}", "{,\"c\":3}"}},
        {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"boolean\"}]}",
         {"[\"a\",true]"},
         {"[\"a\"]", "[true,\"a\"]"}},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
         {"{}", "{\"x\":1,\"y\":2}"},
         {"{\"x\":\"1\"}"}},
        {"true", {"1", "{\"a\":[null,{}]}", "\"s\""}, {"nul"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ifd_grammar_t *g = schema_grammar(cases[i].schema);
        for (size_t j = 0; j < 6 && cases[i].good[j]; j++)
            IFD_CHECK(matches_s(g, cases[i].good[j]), "schema %zu rejects %s", i, cases[i].good[j]);
        for (size_t j = 0; j < 6 && cases[i].bad[j]; j++)
            IFD_CHECK(!matches_s(g, cases[i].bad[j]), "schema %zu accepts %s", i, cases[i].bad[j]);
        ifd_grammar_destroy(g);
    }
}
END_TEST

/* One schema, the texts its grammar must accept and the ones it must refuse. */
typedef struct {
    const char *schema;
    const char *good[8];
    const char *bad[8];
} schema_case_t;

static void check_schema_cases(const schema_case_t *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ifd_grammar_t *g = schema_grammar(cases[i].schema);
        for (size_t j = 0; j < 8 && cases[i].good[j]; j++)
            IFD_CHECK(matches_s(g, cases[i].good[j]), "%s rejects %s", cases[i].schema,
                      cases[i].good[j]);
        for (size_t j = 0; j < 8 && cases[i].bad[j]; j++)
            IFD_CHECK(!matches_s(g, cases[i].bad[j]), "%s accepts %s", cases[i].schema,
                      cases[i].bad[j]);
        ifd_grammar_destroy(g);
    }
}

/* Numeric bounds and multipleOf: exact at the boundaries. */
START_TEST(test_json_schema_numbers)
{
    static const schema_case_t cases[] = {
        {"{\"type\":\"integer\",\"minimum\":0,\"maximum\":120}",
         {"0", "7", "99", "100", "120"},
         {"-1", "121", "01", "1000", "1.5", "-0"}},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":10}",
         {"1", "9"},
         {"0", "10", "-1"}},
        /* draft-04: boolean exclusives */
        {"{\"type\":\"integer\",\"minimum\":-5,\"exclusiveMinimum\":true,\"maximum\":5,"
         "\"exclusiveMaximum\":false}",
         {"-4", "0", "5"},
         {"-5", "6", "-6"}},
        {"{\"type\":\"integer\",\"minimum\":-123,\"maximum\":-45}",
         {"-123", "-100", "-99", "-45", "-50"},
         {"-124", "-44", "-9", "0", "45"}},
        {"{\"type\":\"integer\",\"minimum\":1987,\"maximum\":20301}",
         {"1987", "1999", "2000", "9999", "10000", "20301", "20299"},
         {"1986", "20302", "20310", "999", "30000"}},
        {"{\"type\":\"integer\",\"minimum\":2.5}", {"3", "1000000"}, {"2", "0", "-3"}},
        {"{\"type\":\"number\",\"minimum\":0,\"maximum\":0}", {"0", "0.0"}, {"0.1", "-0.1"}},
        /* numbers: exact integer bounds, exclusive ones need a nonzero fraction */
        {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}",
         {"0.5", "1", "1.0", "1.000", "0.001"},
         {"0", "0.0", "1.01", "1.5", "-0.1", "2", "1e-3"}},
        {"{\"type\":\"number\",\"minimum\":-90,\"maximum\":90}",
         {"-90", "-89.999", "0", "45.5", "90", "90.0"},
         {"-90.5", "-91", "90.01", "91"}},
        /* a search of alternatives anchored on their own, exact */
        {"{\"type\":\"string\",\"pattern\":\"^a$|^b$\"}", {"\"a\"", "\"b\""},
         {"\"ab\"", "\"xa\"", "\"\""}},
        {"{\"type\":\"string\",\"pattern\":\"^ab|cd$|(e|f)g\"}",
         {"\"abx\"", "\"xcd\"", "\"xfgx\"", "\"eg\""},
         {"\"xab\"", "\"cdx\"", "\"ef\""}},
        /* fractional bounds, exact (digit by digit in the fraction) */
        {"{\"type\":\"number\",\"minimum\":-1.5,\"exclusiveMaximum\":2.5}",
         {"-1.5", "-1.50", "-1.49", "-1", "-0.9", "0", "2.4", "2.4999"},
         {"-1.51", "-1.6", "-2", "2.5", "2.50", "2.51", "3"}},
        {"{\"type\":\"number\",\"minimum\":0.0001,\"maximum\":0.1}",
         {"0.0001", "0.00010", "0.00011", "0.05", "0.09999", "0.1", "0.100"},
         {"0", "0.0", "0.00009", "0.1001", "0.11", "1", "-0.05"}},
        {"{\"type\":\"number\",\"exclusiveMinimum\":-0.25,\"exclusiveMaximum\":-0.125}",
         {"-0.2", "-0.249", "-0.126", "-0.13"},
         {"-0.25", "-0.125", "-0.3", "-0.1", "0", "-0.1250"}},
        {"{\"type\":\"number\",\"minimum\":1e-05,\"maximum\":12.75,\"multipleOf\":0.01}",
         {"0.01", "12.75", "3.1", "12.7"},
         {"0", "0.00", "0.001", "12.76", "12.751", "13"}},
        {"{\"type\":\"integer\",\"multipleOf\":5,\"minimum\":0,\"maximum\":20}",
         {"0", "5", "20"},
         {"3", "25", "-5"}},
        /* remainder automaton: 1001 = 7 * 143 */
        {"{\"type\":\"integer\",\"multipleOf\":7,\"minimum\":0}",
         {"0", "7", "700", "1001", "7000007"},
         {"1", "8", "-7", "1000", "07"}},
        {"{\"type\":\"integer\",\"multipleOf\":7}", {"-14", "0", "21"}, {"-15", "22"}},
        {"{\"type\":\"integer\",\"multipleOf\":100,\"minimum\":0,\"maximum\":1000000000}",
         {"0", "100", "123400", "1000000000"},
         {"150", "10", "1000000100", "00"}},
        {"{\"type\":\"number\",\"multipleOf\":0.01,\"minimum\":0}",
         {"1.25", "3", "0.1", "0"},
         {"1.255", "-1"}},
        {"{\"minimum\":3}", {"3", "4.5"}, {"2", "2.9"}},
        {"{\"type\":[\"integer\",\"string\"],\"minimum\":1,\"maxLength\":1}",
         {"1", "\"a\"", "\"\""},
         {"0", "\"ab\""}},
    };
    check_schema_cases(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

START_TEST(test_json_schema_formats)
{
    static const schema_case_t cases[] = {
        /* the calendar's month lengths; February 29th is never written */
        {"{\"type\":\"string\",\"format\":\"date\"}",
         {"\"2024-01-31\"", "\"2023-04-30\"", "\"2023-02-28\"", "\"1999-12-31\""},
         {"\"2023-04-31\"", "\"2023-02-30\"", "\"2024-02-29\"", "\"2023-11-31\"",
          "\"2023-13-01\""}},
        {"{\"type\":\"string\",\"format\":\"email\"}",
         {"\"a.b@example.com\"", "\"x+y@a.b.co\""},
         {"\"ab\"", "\"a@b\"", "\"a b@c.de\"", "\"@c.de\""}},
        {"{\"type\":\"string\",\"format\":\"ipv4\"}",
         {"\"192.168.0.1\"", "\"0.0.0.0\"", "\"255.255.255.255\""},
         {"\"256.1.1.1\"", "\"01.1.1.1\"", "\"1.1.1\"", "\"1.1.1.1.1\""}},
        {"{\"type\":\"string\",\"format\":\"ipv6\"}",
         {"\"::1\"", "\"::\"", "\"2001:db8::ff00:42:8329\"", "\"::ffff:192.0.2.1\"",
          "\"1:2:3:4:5:6:7:8\"", "\"fe80::\""},
         {"\"1:2:3:4:5:6:7:8:9\"", "\":::\"", "\"12345::\"", "\"1::2::3\"", "\"1:2\""}},
        {"{\"type\":\"string\",\"format\":\"hostname\"}",
         {"\"example.com\"", "\"localhost\"", "\"a-b.c9.io\""},
         {"\"-a.com\"", "\"a..b\"", "\"a.b-\"", "\"1.2\"", "\"a_b.com\"", "\"ab--c.com\"",
          "\"a.xn--bcd\""}},
        {"{\"type\":\"string\",\"format\":\"duration\"}",
         {"\"P3Y6M4DT12H30M5S\"", "\"PT1M\"", "\"P2W\"", "\"P1D\""},
         {"\"P\"", "\"PT\"", "\"P1H\"", "\"P1S\"", "\"1D\"", "\"P1Y2D\"", "\"PT1H2S\""}},
        {"{\"type\":\"string\",\"format\":\"uri\"}",
         {"\"https://example.com/a/b?x=1#f\"", "\"ftp://h:21/\""},
         {"\"example.com\"", "\"http://a b\"", "\"/a\""}},
        /* idn-email: non-ASCII letters in the local part; uri-template: RFC 6570 */
        {"{\"type\":\"string\",\"format\":\"idn-email\"}",
         {"\"\u00e9l\u00e8ve@example.com\"", "\"a.b@c.de\"", "\"\u4f60\u597d@x.cn\""},
         {"\"a@\u00e9x.com\"", "\"ab\"", "\"a b@c.de\""}},
        {"{\"type\":\"string\",\"format\":\"idn-hostname\"}",
         {"\"example.com\"", "\"a-b.c9.io\""},
         {"\"b\u00fccher.de\"", "\"-a.com\""}},
        {"{\"type\":\"string\",\"format\":\"uri-template\"}",
         {"\"http://e.com/{+path}/x{?q,lang:2}\"", "\"\"", "\"/{a.b*}%20\u00e9\""},
         {"\"/{a\"", "\"/{a:0}\"", "\"a b\"", "\"{}\""}},
        {"{\"type\":\"string\",\"format\":\"uri-reference\"}",
         {"\"/a/b\"", "\"x?y\"", "\"\"", "\"http://h/p\"", "\"#frag\""},
         {"\"a b\"", "\"//x\""}},
        /* unknown formats are annotations; OpenAPI's int64 on an integer too */
        {"{\"type\":\"integer\",\"format\":\"int64\"}", {"5"}, {"\"5\""}},
        {"{\"type\":\"string\",\"format\":\"color-hex\"}", {"\"x\""}, {"1"}},
    };
    check_schema_cases(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

/* Objects, arrays, merged combinators, annotations. */
#define REF_ANCHOR \
    "{\"$defs\":{\"n\":{\"$anchor\":\"num\",\"type\":\"integer\",\"minimum\":3}},\"type\":\"o" \
    "bject\",\"properties\":{\"a\":{\"$ref\":\"#num\"}},\"required\":[\"a\"]}"
#define REF_ID04 \
    "{\"definitions\":{\"g\":{\"id\":\"#gate\",\"type\":\"string\",\"maxLength\":2}},\"type\"" \
    ":\"array\",\"items\":{\"$ref\":\"#gate\"}}"
#define REF_RES \
    "{\"$id\":\"https://example.com/root.json\",\"$defs\":{\"x:y\":{\"type\":\"boolean\"},\"c" \
    "\":{\"$id\":\"child.json\",\"type\":\"integer\",\"maximum\":5}},\"type\":\"object\",\"pr" \
    "operties\":{\"p\":{\"$ref\":\"#/$defs/x%3Ay\"},\"q\":{\"$ref\":\"child.json\"},\"r\":{\"" \
    "$ref\":\"https://example.com/root.json#/$defs/c\"}},\"required\":[\"p\",\"q\",\"r\"]}"
START_TEST(test_json_schema_structure)
{
    static const schema_case_t cases[] = {
        /* NUL in pattern, enum and const: read whole; the grammar writes it as the JSON
         * escape \u0000, never as a raw byte (which no JSON string holds) */
        {"{\"type\":\"string\",\"pattern\":\"^[^\\u0000]+$\"}",
         {"\"ab\"", "\"\\u0001\""},
         {"\"\"", "\"a\\u0000\""}},
        {"{\"type\":\"string\",\"pattern\":\"^a\\u0000b$\"}",
         {"\"a\\u0000b\""},
         {"\"ab\"", "\"a\\u0001b\""}},
        {"{\"enum\":[\"x\\u0000\",1],\"const\":\"x\\u0000\"}",
         {"\"x\\u0000\""},
         {"\"x\"", "1"}},
        /* $ref to anchors ($anchor, draft-04's id "#name"), a percent-encoded pointer,
         * an embedded resource's $id (relative and absolute), the root's own $id */
        {REF_ANCHOR, {"{\"a\":3}", "{\"a\":40}"}, {"{\"a\":2}", "{\"a\":\"x\"}"}},
        {REF_ID04, {"[\"ab\"]", "[]"}, {"[\"abc\"]", "[1]"}},
        /* a root with an $id, copied by the oneOf's merge: still the document (JSON
         * Schema Store's jsone.json unrolled it until 1,024 references) */
        {"{\"$id\":\"https://x.test/j\",\"$defs\":{\"v\":{\"oneOf\":[{\"$ref\":\"#\"},{\"type\":"
         "\"array\",\"items\":{\"$ref\":\"#\"}},{\"type\":[\"null\",\"integer\"]}]}},\"type\":"
         "\"object\",\"additionalProperties\":{\"$ref\":\"#/$defs/v\"}}",
         {"{\"a\":{\"b\":1}}", "{\"a\":[{}]}", "{\"a\":null}"},
         {"{\"a\":\"s\"}", "{\"a\":[1]}"}},
        /* a fragment inside an embedded resource: read in that resource first */
        {"{\"$id\":\"https://x.test/r\",\"$defs\":{\"c\":{\"$id\":\"c\",\"type\":\"array\","
         "\"items\":{\"anyOf\":[{\"type\":\"integer\"},{\"$ref\":\"#\"}]}}},\"type\":"
         "\"object\",\"properties\":{\"x\":{\"$ref\":\"c\"}},\"required\":[\"x\"]}",
         {"{\"x\":[1,[2,[3]]]}", "{\"x\":[]}"},
         {"{\"x\":[1,{\"x\":[2]}]}", "{\"x\":[\"a\"]}"}},
        {REF_RES,
         {"{\"p\":true,\"q\":5,\"r\":-1}"},
         {"{\"p\":1,\"q\":5,\"r\":1}", "{\"p\":true,\"q\":6,\"r\":1}",
          "{\"p\":true,\"q\":1,\"r\":6}"}},
        /* a required name outside properties: under the patterns it matches (all of
         * them), under additionalProperties where none does */
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
         "\"patternProperties\":{\"^x-\":{\"type\":\"string\"},\"id$\":{\"maxLength\":2}},"
         "\"required\":[\"a\",\"x-id\",\"zz\"],\"additionalProperties\":{\"type\":"
         "\"boolean\"}}",
         {"{\"a\":1,\"x-id\":\"s\",\"zz\":true}", "{\"a\":1,\"x-id\":\"st\",\"zz\":false}"},
         {"{\"a\":1,\"x-id\":1,\"zz\":true}", "{\"a\":1,\"x-id\":\"s\",\"zz\":\"s\"}",
          "{\"a\":1,\"x-id\":\"str\",\"zz\":true}", "{\"a\":1,\"x-id\":\"s\"}"}},
        /* maps with several patterns: a key of one pattern gets a value valid for every
         * pattern that may match it too (all but those whose anchored literal prefixes
         * differ: ^x- and ^/ below); a pattern whose value nothing satisfies writes no key */
        {"{\"type\":\"object\",\"patternProperties\":{\"^x-\":{\"type\":\"integer\"},\"^/\":{"
         "\"type\":\"string\"},\"b\":{\"maxLength\":1}}}",
         {"{}", "{\"x-a\":1,\"/p\":\"s\"}", "{\"/b\":\"s\"}", "{\"x-b\":2}"},
         {"{\"x-a\":\"s\"}", "{\"/p\":1}", "{\"/b\":\"st\"}", "{\"q\":1}"}},
        {"{\"type\":\"object\",\"patternProperties\":{\".*\":{\"type\":\"integer\"},\"^a\":"
         "{\"minimum\":3},\"^b\":false},\"minProperties\":1}",
         {"{\"a\":3}", "{\"a\":4,\"ab\":5}"},
         /* (.* may match what ^b forbids: its keys are not written) */
         {"{}", "{\"a\":2}", "{\"c\":4}", "{\"b\":4}", "{\"a\":\"s\"}"}},
        /* patterns no grammar writes (lookaround) still decide which schemas a declared
         * name falls under (PCRE2 matches them); in a map, none of their keys is written */
        {"{\"type\":\"object\",\"properties\":{\"ab\":{},\"xb\":{}},\"patternProperties\":{"
         "\"^(?!x)\":{\"type\":\"integer\"}},\"required\":[\"ab\",\"xb\"]}",
         {"{\"ab\":1,\"xb\":\"s\"}", "{\"ab\":2,\"xb\":3}"},
         {"{\"ab\":\"s\",\"xb\":1}"}},
        {"{\"type\":\"object\",\"patternProperties\":{\"^(?!x)[a-z]+$\":{\"type\":\"integer\"},"
         "\"^[0-9]+$\":{\"type\":\"integer\",\"minimum\":3}}}",
         {"{}", "{\"12\":5}"},
         {"{\"12\":2}", "{\"ab\":1}"}},
        /* enum reals written at their shortest (a checker reading decimals exactly tells
         * 2.1 from jansson's 2.1000000000000001); exponents of at most two digits, so
         * every number written fits a double (the check at the end can read it) */
        {"{\"enum\":[2,2.1,0.3,1e300]}", {"2.1", "0.3", "2", "1e300"},
         {"2.1000000000000001", "0.29999999999999999", "1.0000000000000001e+300"}},
        {"{\"type\":\"number\"}", {"1e99", "-2.5E-12", "0.5e+7"}, {"1e100", "-3E-308"}},
        /* additionalProperties false does not forbid a name a pattern allows */
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"patternProperties\":{\"^[a-z]+$\":"
         "{\"type\":\"integer\"}},\"additionalProperties\":false,\"required\":[\"bc\"]}",
         {"{\"bc\":1}", "{\"a\":3,\"bc\":2}"},
         {"{\"bc\":\"x\"}", "{}", "{\"a\":null,\"bc\":2}"}},
        /* a recursion the merge unrolls ($ref beside minProperties, again inside its
         * target): past 16 levels the same schema text refers to its own rule */
        {"{\"type\":\"object\",\"additionalProperties\":{\"minProperties\":1,\"anyOf\":[{"
         "\"type\":\"string\"},{\"$ref\":\"#/definitions/r\"}]},\"definitions\":{\"r\":{\"type\":"
         "\"object\",\"additionalProperties\":{\"minProperties\":1,\"anyOf\":[{\"type\":"
         "\"string\"},{\"$ref\":\"#/definitions/r\"}]}}}}",
         {"{}", "{\"a\":\"x\"}", "{\"a\":{\"b\":\"y\"},\"c\":\"z\"}",
          "{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":"
          "\"x\"}}}}}}}}}}}}"},
         {"{\"a\":{}}", "{\"a\":1}",
          "{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{}}}}}}}}}}"
          "}}"}},
        /* annotations and vendor keywords are ignored */
        {"{\"type\":\"string\",\"id\":\"x\",\"self\":{\"a\":1},\"x-kubernetes-group\":1,"
         "\"_format\":\"q\",\"$comment\":\"c\",\"examples\":[\"a\"],\"deprecated\":true,"
         "\"then\":{\"type\":\"integer\"},\"definitions\":{}}",
         {"\"a\""},
         {"1"}},
        {"{\"type\":\"object\",\"patternProperties\":{\"^[a-z]+$\":{\"type\":\"integer\"}},"
         "\"additionalProperties\":false,\"minProperties\":1,\"maxProperties\":3}",
         {"{\"ab\":1}", "{\"a\":1,\"b\":2,\"c\":3}"},
         {"{}", "{\"Ab\":1}", "{\"a\":\"1\"}", "{\"a\":1,\"b\":2,\"c\":3,\"d\":4}"}},
        {"{\"properties\":{\"ab\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},"
         "\"patternProperties\":{\"^a\":{\"minimum\":5}},\"required\":[\"ab\",\"b\"]}",
         {"{\"ab\":5,\"b\":0}"},
         {"{\"ab\":4,\"b\":0}"}},
        {"{\"$defs\":{\"A\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
         "\"string\"}},\"required\":[\"a\"]}},\"allOf\":[{\"$ref\":\"#/$defs/A\"},{"
         "\"properties\":{\"b\":{\"type\":\"integer\",\"minimum\":-5,\"exclusiveMaximum\":3}}"
         ",\"required\":[\"b\"]}]}",
         {"{\"a\":\"x\",\"b\":2}", "{\"a\":\"\",\"b\":-5}"},
         {"{\"a\":\"x\"}", "{\"a\":\"x\",\"b\":3}", "{\"b\":1}"}},
        {"{\"$defs\":{\"P\":{\"type\":\"integer\"}},\"$ref\":\"#/$defs/P\",\"minimum\":1}",
         {"1", "20"},
         {"0", "\"1\""}},
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"minimum\":0,"
         "\"maxLength\":2}",
         {"3", "\"ab\""},
         {"-1", "\"abc\""}},
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},"
         "\"x\":{\"type\":\"integer\"}},\"required\":[\"kind\",\"x\"]},{\"type\":\"object\","
         "\"properties\":{\"kind\":{\"const\":\"b\"},\"y\":{\"type\":\"string\"}},"
         "\"required\":[\"kind\",\"y\"]}]}",
         {"{\"kind\":\"a\",\"x\":1}", "{\"kind\":\"b\",\"y\":\"s\"}"},
         {"{\"kind\":\"a\",\"y\":\"s\"}"}},
        {"{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", {"\"a\"", "1"}, {"true"}},
        /* oneOf: objects told apart by required names; arrays by their items (and not []) */
        {"{\"type\":\"object\",\"properties\":{\"r\":{},\"w\":{},\"h\":{}},\"oneOf\":[{"
         "\"required\":[\"r\"]},{\"required\":[\"w\",\"h\"]}]}",
         {"{\"r\":1}", "{\"w\":1,\"h\":2}"},
         {"{\"r\":1,\"w\":1,\"h\":2}", "{\"w\":1}", "{}"}},
        {"{\"oneOf\":[{\"type\":\"array\",\"items\":{\"type\":\"number\"}},{\"type\":"
         "\"array\",\"items\":{\"type\":\"string\"}}]}",
         {"[1]", "[\"a\",\"b\"]"},
         {"[]", "[1,\"a\"]"}},
        {"{\"properties\":{\"a\":{},\"b\":{},\"c\":{}},\"minProperties\":2,"
         "\"maxProperties\":2}",
         {"{\"a\":1,\"b\":2}"},
         {"{\"a\":1}", "{\"a\":1,\"b\":2,\"c\":3}"}},
        {"{\"prefixItems\":[{\"type\":\"integer\"}],\"items\":{\"type\":\"string\"},"
         "\"minItems\":3}",
         {"[1,\"a\",\"b\"]"},
         {"[1]", "[1,2,3]"}},
        {"{\"items\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"additionalItems\":false}",
         {"[1,\"a\"]"},
         {"[1]", "[\"a\",1]"}},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":"
         "[\"a\",\"b\"],\"additionalProperties\":{\"type\":\"boolean\"}}",
         {"{\"a\":1,\"b\":true}"},
         {"{\"a\":1}", "{\"a\":1,\"b\":1}"}},
        {"{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},"
         "\"dependentRequired\":{\"a\":[\"b\"]}}",
         {"{\"b\":1}", "{\"a\":1,\"b\":2}"},
         {"{\"a\":1}"}},
        {"{\"type\":\"string\",\"enum\":[\"a\",1]}", {"\"a\""}, {"1"}},
        {"{\"type\":\"array\",\"uniqueItems\":true,\"maxItems\":1}", {"[]", "[1]"}, {"[1,2]"}},
        {"{\"allOf\":[{\"type\":[\"integer\",\"string\"]},{\"type\":\"number\"}],"
         "\"maximum\":3}",
         {"3", "-2"},
         {"4", "\"a\"", "1.5"}},
        /* not: the other types; names left out */
        {"{\"not\":{\"type\":[\"string\",\"null\"]}}", {"1", "true", "[]", "{}"}, {"\"a\"", "null"}},
        {"{\"properties\":{\"a\":{},\"b\":{}},\"not\":{\"required\":[\"b\"]}}",
         {"{}", "{\"a\":1}"},
         {"{\"b\":1}", "{\"a\":1,\"b\":1}"}},
        {"{\"properties\":{\"a\":{},\"b\":{}},\"required\":[\"a\"],\"not\":{\"anyOf\":[{"
         "\"required\":[\"b\"]}]}}",
         {"{\"a\":1}"},
         {"{\"a\":1,\"b\":1}"}},
        /* pattern with lengths: the one variable repetition takes what they leave */
        {"{\"type\":\"string\",\"pattern\":\"^[a-z][a-z0-9_]*$\",\"minLength\":2,"
         "\"maxLength\":4}",
         {"\"ab\"", "\"a_1z\""},
         {"\"a\"", "\"abcde\"", "\"1ab\"", "\"aB\""}},
        {"{\"type\":\"string\",\"pattern\":\"^IGF\\\\d{2}-[A-Z]+$\",\"maxLength\":8}",
         {"\"IGF12-A\"", "\"IGF12-AB\""},
         {"\"IGF12-ABC\"", "\"IGF1-AB\"", "\"IGF12-\""}},
        /* several repetitions: maxLength's room (8) shared out: 2 more each, the rest
         * to the first (\d{1,5} \. \d{1,3} .{0,2}); all valid, not every valid one */
        {"{\"type\":\"string\",\"pattern\":\"^(\\\\d+\\\\.\\\\d+.*)$\",\"maxLength\":11}",
         {"\"1.2\"", "\"12345.678ab\"", "\"12.3x\""},
         {"\"123456.7\"", "\"1.2345abc\"", "\"a.1\"", "\"1.2abc\""}},
        /* minLength's extra goes to the first repetition ([ab]{3,} [cd]*) */
        {"{\"type\":\"string\",\"pattern\":\"^[ab]+[cd]*$\",\"minLength\":3}",
         {"\"aaa\"", "\"abab\"", "\"abbcd\""},
         {"\"ac\"", "\"ab\"", "\"abx\""}},
        /* dependentSchemas / draft-04 dependencies with a schema: merged in */
        {"{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},"
         "\"dependencies\":{\"a\":{\"required\":[\"b\"]}},\"dependentSchemas\":{\"b\":{"
         "\"properties\":{\"b\":{\"minimum\":3}}}}}",
         {"{\"b\":3}", "{\"a\":1,\"b\":4}"},
         {"{\"a\":1}", "{\"b\":2}", "{}"}},
        /* a not {required} inside a branch or member still holds once merged */
        {"{\"properties\":{\"a\":{},\"b\":{}},\"anyOf\":[{\"not\":{\"required\":[\"a\"]},"
         "\"required\":[\"b\"]},{\"required\":[\"a\"],\"not\":{\"required\":[\"b\"]}}]}",
         {"{\"b\":1}", "{\"a\":1}"},
         {"{\"a\":1,\"b\":1}", "{}"}},
        {"{\"properties\":{\"a\":{},\"b\":{}},\"allOf\":[{\"not\":{\"required\":[\"a\"]}}]}",
         {"{}", "{\"b\":1}"},
         {"{\"a\":1}"}},
        /* a format whose strings all obey the lengths */
        {"{\"type\":\"string\",\"format\":\"date\",\"minLength\":10,\"maxLength\":10}",
         {"\"2024-01-31\""},
         {"\"2024-1-31\""}},
        {"{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":"
         "false},{\"properties\":{\"a\":{\"minimum\":1},\"b\":{}}}]}",
         {"{}", "{\"a\":1}"},
         {"{\"a\":0}", "{\"b\":1}", "{\"a\":1,\"b\":1}"}},
    };
    check_schema_cases(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

START_TEST(test_json_schema_unsupported)
{
    static const struct {
        const char *schema, *keyword;
    } cases[] = {
        {"{\"not\":{}}", "'not'"},
        {"{\"not\":{\"type\":\"integer\"}}", "'not'"},
        {"{\"not\":{\"enum\":[1]}}", "'not'"},
        {"{\"properties\":{\"a\":{}},\"required\":[\"a\"],\"not\":{\"required\":[\"a\"]}}",
         "'not'"},
        {"{\"type\":\"string\",\"format\":\"email\",\"maxLength\":40}", "'format'"},
        {"{\"type\":\"string\",\"format\":\"uri\",\"maxLength\":2048}", "'format'"},
        {"{\"if\":{\"type\":\"string\"},\"then\":{\"minLength\":1}}", "'if'"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "'uniqueItems'"},
        {"{\"type\":\"array\",\"contains\":{\"type\":\"integer\"}}", "'contains'"},
        {"{\"dependentSchemas\":{\"a\":{\"not\":{}}}}", "'not'"},
        {"{\"type\":\"object\",\"propertyNames\":{\"maxLength\":3}}", "'propertyNames'"},
        {"{\"unevaluatedProperties\":false}", "'unevaluatedProperties'"}, /* (strict) */
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", "'oneOf'"},
        /* 3 matches both: minLength constrains strings only */
        {"{\"oneOf\":[{\"minLength\":2},{\"type\":\"integer\"}]}", "'oneOf'"},
        {"{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "'type'"},
        {"{\"allOf\":[{\"pattern\":\"a\"},{\"pattern\":\"b\"}]}", "'pattern'"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "'minimum'"},
        {"{\"type\":\"number\",\"minimum\":0.5,\"maximum\":0.25}", "'minimum'"},
        {"{\"type\":\"number\",\"exclusiveMinimum\":1,\"exclusiveMaximum\":1}", "'minimum'"},
        {"{\"type\":\"integer\",\"multipleOf\":7,\"minimum\":-100000000,\"maximum\":"
         "100000000}",
         "'multipleOf'"},
        {"{\"type\":\"number\",\"multipleOf\":0.3}", "'multipleOf'"},
        {"{\"properties\":{\"a\":{}},\"required\":[\"b\"],\"additionalProperties\":false}",
         "'required'"},
        {"{\"properties\":{\"a\":{}},\"minProperties\":2}", "'minProperties'"},
        {"{\"$ref\":\"http://x/y.json\"}", "$ref"},
        {"{\"$ref\":\"#/$defs/missing\"}", "$ref"},
        {"{\"type\":\"strin\"}", "'type'"},
        {"{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "regex"},
        {"{\"type\":\"string\",\"pattern\":\"a\",\"minLength\":2}", "'pattern'"},
        {"false", "'false'"},
        /* a NUL where the converter reads C strings (it would cut them short) */
        {"{\"required\":[\"a\\u0000b\"]}", "'required' holds a NUL"},
        {"{\"properties\":{\"x\":{\"$ref\":\"#/$defs/a\\u0000\"}}}", "'$ref' holds a NUL"},
        {"{\"dependencies\":{\"x\":[\"y\\u0000\"]}}", "'dependencies' holds a NUL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_error_t je;
        json_t *s = json_loads(cases[i].schema, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        ck_assert_ptr_nonnull(s);
        ifd_buf_t b = IFD_BUF_INIT;
        char err[256];
        int rc = ifd_gconv_json_schema(s, &b, NULL, err, sizeof err);
        ck_assert_msg(rc == IFD_ENOTSUP, "%s: rc %d", cases[i].schema, rc);
        ck_assert_msg(strstr(err, cases[i].keyword), "%s → %s", cases[i].schema, err);
        ifd_buf_free(&b);
        json_decref(s);
    }
    /* no finite value: an object that requires a property of its own type (directly,
     * or through allOf as JSONSchemaBench's Github_easy o17683 does); the grammar
     * converts, and compiling refuses it rather than generating until max_tokens */
    static const char *const endless[] = {
        "{\"$defs\":{\"F\":{\"type\":\"object\",\"properties\":{\"c\":{\"$ref\":\"#/$defs/F\"}},"
        "\"required\":[\"c\"]}},\"$ref\":\"#/$defs/F\"}",
        "{\"definitions\":{\"C\":{\"type\":\"object\"},\"F\":{\"properties\":{\"c\":{\"allOf\":"
        "[{\"$ref\":\"#/definitions/F\"},{\"$ref\":\"#/definitions/C\"}]}},\"required\":[\"c\"],"
        "\"type\":\"object\"}},\"properties\":{\"F\":{\"$ref\":\"#/definitions/F\"}},\"required\":"
        "[\"F\"]}"};
    for (size_t i = 0; i < 2; i++) {
        json_error_t je;
        json_t *s = json_loads(endless[i], 0, &je);
        ifd_buf_t b = IFD_BUF_INIT;
        char err[256];
        ck_assert_int_eq(ifd_gconv_json_schema(s, &b, NULL, err, sizeof err), 0);
        ifd_grammar_t *g = NULL;
        ck_assert_int_eq(ifd_grammar_compile(b.data, b.len, &g, err, sizeof err), IFD_EFORMAT);
        ck_assert_msg(strstr(err, "matches no text"), "%s → %s", endless[i], err);
        ifd_buf_free(&b);
        json_decref(s);
    }
}
END_TEST

/* Integers beyond int64 in a schema (schema_json.h): bounds read as doubles
 * (the digit grammars stay exact: nothing past 16 digits is written), enum /
 * const values a double does not hold refused, property names not taken for
 * keywords, and text without such integers parsed exactly as jansson does. */
START_TEST(test_schema_json_wide)
{
    json_error_t je;
    const char *t = "{\"type\":\"integer\",\"maximum\":18446744073709551615,\"minimum\":"
                    "-99999999999999999999,\"enum\":[9223372036854776000,1,2],"
                    "\"properties\":{\"enum\":{\"maximum\":12345678901234567890123}}}";
    json_t *s = ifd_schema_json_loadb(t, strlen(t), 0, &je);
    ck_assert_msg(s, "%s", je.text);
    ck_assert(json_is_real(json_object_get(s, "maximum")));
    ck_assert(json_real_value(json_object_get(s, "maximum")) == 18446744073709551615.0);
    ck_assert(json_real_value(json_object_get(s, "minimum")) == -1e20);
    /* 9223372036854776000: the double 2^63, whose shortest digits are the literal's */
    ck_assert(json_real_value(json_array_get(json_object_get(s, "enum"), 0)) ==
              9223372036854775808.0);
    ck_assert(json_is_integer(json_array_get(json_object_get(s, "enum"), 1)));
    json_object_del(s, "enum");
    json_object_del(s, "properties");
    ifd_buf_t b = IFD_BUF_INIT;
    char err[256];
    ck_assert_int_eq(ifd_gconv_json_schema(s, &b, NULL, err, sizeof err), 0);
    ifd_grammar_t *g = compile_ok(b.data);
    ck_assert(matches_s(g, "9999999999999999"));
    ck_assert(matches_s(g, "-9999999999999999"));
    ck_assert(!matches_s(g, "99999999999999999"));
    ifd_grammar_destroy(g);
    ifd_buf_free(&b);
    json_decref(s);
    /* a minimum beyond every written integer: no value the grammar writes */
    t = "{\"type\":\"integer\",\"minimum\":18446744073709551615}";
    s = ifd_schema_json_loadb(t, strlen(t), 0, &je);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(ifd_gconv_json_schema(s, &b, NULL, err, sizeof err), IFD_ENOTSUP);
    ifd_buf_free(&b);
    json_decref(s);
    /* enum / const values a double would round: refused, never rounded */
    static const char *const refused[] = {
        "{\"enum\":[1,18446744073709551615]}",
        "{\"const\":{\"a\":[-18446744073709551615]}}",
        "{\"items\":{\"enum\":[{\"k\":100000000000000000001}]}}",
    };
    for (size_t i = 0; i < 3; i++) {
        s = ifd_schema_json_loadb(refused[i], strlen(refused[i]), 0, &je);
        ck_assert_msg(!s && strstr(je.text, "'enum' or 'const'"), "%s: %s", refused[i], je.text);
    }
    /* malformed text: jansson's own message */
    t = "{\"maximum\":18446744073709551615,";
    ck_assert_ptr_null(ifd_schema_json_loadb(t, strlen(t), 0, &je));
    ck_assert_ptr_null(strstr(je.text, "too big"));
    t = "{\"a\":[1,2.5,\"x\\\"18446744073709551615\"]}";
    s = ifd_schema_json_loadb(t, strlen(t), 0, &je);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(s, "a"), 2)),
                     "x\"18446744073709551615");
    json_decref(s);
}
END_TEST

/* Hash-consed rules (ifd__gconv_rule): a part the merge inlines anew at each
 * use (a $ref beside a constraining keyword) is written once, so the grammar
 * grows by the uses' own small rules, not by copies of the part. */
START_TEST(test_schema_rules_shared)
{
    size_t len[2];
    for (int k = 0; k < 2; k++) {
        ifd_buf_t t = IFD_BUF_INIT;
        ifd_buf_puts(&t, "{\"$defs\":{\"big\":{\"type\":\"object\",\"properties\":{");
        for (int i = 0; i < 40; i++)
            ifd_buf_printf(&t, "%s\"p%d\":{\"type\":\"string\",\"pattern\":\"^[a-z]{%d}x$\"}",
                           i ? "," : "", i, i + 1);
        ifd_buf_puts(&t, "}}},\"type\":\"object\",\"properties\":{");
        for (int i = 0; i < 100 * (k + 1); i++)
            ifd_buf_printf(&t, "%s\"a%d\":{\"$ref\":\"#/$defs/big\",\"minProperties\":1}",
                           i ? "," : "", i);
        ifd_buf_puts(&t, "}}");
        json_error_t je;
        json_t *sj = json_loads(t.data, 0, &je);
        ck_assert_ptr_nonnull(sj);
        ifd_buf_t b = IFD_BUF_INIT;
        char err[256];
        ck_assert_msg(ifd_gconv_json_schema(sj, &b, NULL, err, sizeof err) == 0, "%s", err);
        len[k] = b.len;
        if (k == 1) {
            ifd_grammar_t *g = compile_ok(b.data);
            ck_assert(matches_s(g, "{\"a7\":{\"p0\":\"ax\"},\"a199\":{\"p0\":\"bx\",\"p2\":\"abcx\"}}"));
            ck_assert(!matches_s(g, "{\"a7\":{}}"));
            ck_assert(!matches_s(g, "{\"a7\":{\"p0\":\"abx\"}}"));
            ifd_grammar_destroy(g);
        }
        ifd_buf_free(&b);
        ifd_buf_free(&t);
        json_decref(sj);
    }
    /* 100 more uses: a few hundred bytes each (a copy of big would be tens of KB) */
    ck_assert_msg(len[1] - len[0] < 100 * 1000, "%zu then %zu bytes", len[0], len[1]);
}
END_TEST

/* The loose conversion (ifd_gconv_json_schema_loose): what the strict one
 * refuses is over-approximated (approx set) and the check at the end
 * (schema_check.h) decides. For each schema: valid texts the grammar
 * accepts and the check passes (the grammar is a superset: never stricter
 * than the schema), and texts the grammar accepts that the check catches
 * (the keyword the grammar left out). Schemas a grammar enforces whole keep
 * approx false; what nothing can check is still refused. */
#define DISC1                                                                                      \
    "{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"a\",\"b\",\"c\"]},\"x\":{\"type\":"   \
    "\"integer\"}},\"if\":{\"properties\":{\"k\":{\"const\":\"a\"}}},\"then\":{\"required\":["     \
    "\"x\"]},\"else\":{\"properties\":{\"x\":false}}}"
#define DISC2                                                                                      \
    "{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"a\",\"b\",\"c\"]},\"y\":{\"type\":"   \
    "\"boolean\"}},\"if\":{\"properties\":{\"k\":{\"enum\":[\"a\",\"b\"]}},\"required\":[\"k\"]}," \
    "\"else\":{\"required\":[\"y\"]}}"
#define DEPX                                                                                       \
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":"          \
    "\"string\"}},\"additionalProperties\":false,\"anyOf\":[{\"required\":[\"a\"]},{"           \
    "\"required\":[\"b\"]}],\"dependencies\":{\"a\":{\"properties\":{\"b\":{\"not\":{}}}},"    \
    "\"b\":{\"properties\":{\"a\":{\"not\":{}}}}}}"
#define DEPR                                                                                       \
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":"          \
    "\"string\"},\"d\":{\"type\":\"string\"}},\"required\":[\"a\"],\"additionalProperties\":"   \
    "false,\"dependentSchemas\":{\"a\":{\"properties\":{\"b\":{\"not\":{}}},\"required\":"      \
    "[\"d\"]},\"b\":{\"properties\":{\"a\":{\"not\":{}}}}}}"
START_TEST(test_json_schema_loose)
{
    static const struct {
        const char *schema;
        const char *valid[3], *caught[3];
    } cases[] = {
        {"{\"not\":{\"type\":\"integer\"}}", {"1.5", "\"a\"", "[1]"}, {"3"}},
        {"{\"not\":{\"enum\":[1]}}", {"2", "null"}, {"1"}},
        {"{\"type\":\"string\",\"format\":\"email\",\"maxLength\":12}", {"\"a@b.co\""},
         {"\"abcdefgh@b.co\""}},
        {"{\"if\":{\"type\":\"string\"},\"then\":{\"minLength\":2}}", {"\"ab\"", "1"}, {"\"a\""}},
        {"{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"a\",\"b\"]},\"x\":{\"type\":"
         "\"integer\"}},\"required\":[\"k\"],\"if\":{\"properties\":{\"k\":{\"const\":\"a\"}}},"
         "\"then\":{\"required\":[\"x\"]}}",
         {"{\"k\":\"a\",\"x\":1}", "{\"k\":\"b\"}"}, {NULL}},
        /* if/then/else read as anyOf [allOf [if, then], else]: {"k":"a"} satisfies
         * neither, nor does {"k":"b","x":1} (then without its if), so the grammar refuses
         * them (below); {"k":"a","y":2} satisfies else, whose "not if" is left out */
        {"{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"a\",\"b\"]},\"x\":{\"type\":"
         "\"integer\"},\"y\":{\"type\":\"integer\"}},\"required\":[\"k\"],\"additionalProperties\":"
         "false,\"if\":{\"properties\":{\"k\":{\"const\":\"a\"}}},\"then\":{\"required\":[\"x\"]},"
         "\"else\":{\"required\":[\"y\"]}}",
         {"{\"k\":\"a\",\"x\":1}", "{\"k\":\"b\",\"y\":2}", "{\"k\":\"a\",\"x\":1,\"y\":2}"},
         {NULL}},
        /* the discriminator form exact: "not if" is k one of the other values (k absent
         * satisfies an if that does not require it, and fails one that does) */
        {DISC1, {"{\"x\":1}", "{\"k\":\"a\",\"x\":1}", "{\"k\":\"b\"}"}, {NULL}},
        {DISC2, {"{\"k\":\"a\"}", "{\"y\":true}", "{\"k\":\"c\",\"y\":false}"}, {NULL}},
        {"{\"properties\":{\"k\":{\"enum\":[\"a\",\"b\"]}},\"if\":{\"properties\":{\"k\":{"
         "\"const\":\"a\"}}},\"then\":{\"type\":[\"object\",\"string\"]},\"else\":{\"type\":"
         "[\"object\",\"integer\"]}}",
         {"\"s\"", "{\"k\":\"b\"}", "{}"}, {NULL}},
        /* contains: the items of its schema the array must hold, exact without
         * maxContains (nothing to catch), maxContains left to the check */
        {"{\"type\":\"array\",\"items\":{\"type\":[\"integer\",\"string\"]},\"contains\":{\"type\":"
         "\"integer\",\"minimum\":5}}",
         {"[\"a\",7]", "[5]", "[\"x\",1,9,\"y\"]"}, {NULL}},
        {"{\"type\":\"array\",\"items\":{\"type\":[\"integer\",\"string\"]},\"contains\":{\"type\":"
         "\"integer\",\"minimum\":5},\"minContains\":2,\"maxContains\":3}",
         {"[\"a\",7,1,5]", "[5,6,7]"}, {"[5,6,7,8]", "[9,\"a\",9,9,9]"}},
        /* two different contains (allOf): neither enforced by the grammar (one item
         * need not match both), the check has them */
        {"{\"type\":\"array\",\"allOf\":[{\"contains\":{\"type\":\"integer\"}},{\"contains\":"
         "{\"type\":\"string\"}}]}",
         {"[1,\"a\"]", "[\"b\",true,2]"}, {"[1]", "[\"a\"]"}},
        {"{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"},\"contains\":{\"maximum\":0},"
         "\"$defs\":{\"n\":{\"type\":\"integer\"}},\"minItems\":1}",
         {"[1,-2]", "[0]"}, {NULL}},
        /* maxContains and lengths beside contains, exact where contains' complement
         * is plain (nothing left for the check to catch) */
        {"{\"type\":\"array\",\"items\":{\"type\":[\"integer\",\"string\"]},\"contains\":{"
         "\"type\":\"integer\"},\"maxContains\":2}",
         {"[\"a\",1,\"b\",2]", "[1]", "[3,\"x\"]"}, {NULL}},
        {"{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"contains\":{\"const\":"
         "\"a\"},\"minContains\":1,\"maxContains\":1,\"minItems\":2,\"maxItems\":3}",
         {"[\"a\",\"b\"]", "[\"c\",\"a\",\"b\"]"}, {NULL}},
        {"{\"type\":\"array\",\"contains\":{\"const\":true},\"maxContains\":1}",
         {"[true]", "[false,true,1,\"x\"]", "[null,{},true]"}, {NULL}},
        /* a maxContains no array of maxItems can pass is no bound; huge counts fall back
         * to the check */
        {"{\"type\":\"array\",\"contains\":{\"minimum\":3},\"maxContains\":2,\"maxItems\":2,"
         "\"items\":{\"type\":\"integer\"}}",
         {"[3,4]", "[1,5]"}, {NULL}},
        {"{\"type\":\"array\",\"contains\":{\"type\":\"integer\"},\"minContains\":1,"
         "\"maxContains\":9223372036854775807}",
         {"[1,2]", "[\"a\",3]"}, {"[\"a\"]"}},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"contains\":{\"minimum\":10},"
         "\"minItems\":3,\"maxItems\":4}",
         {"[1,2,10]", "[10,11,12,13]", "[10,1,2]"}, {NULL}},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"uniqueItems\":true}",
         {"[1,2]", "[]"}, {"[1,1]", "[3,2,3]"}},
        {"{\"type\":\"array\",\"contains\":{\"type\":\"integer\"}}", {"[\"a\",1]", "[1]"}, {NULL}},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"},\"propertyNames\":"
         "{\"maxLength\":3}}",
         {"{\"abc\":1}"}, {"{\"abcd\":1}"}},
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", {"1.5"}, {"2"}},
        {"{\"oneOf\":[{\"minLength\":2},{\"type\":\"integer\"}]}", {"\"ab\""}, {"3"}},
        {"{\"allOf\":[{\"pattern\":\"a\"},{\"pattern\":\"b\"}],\"type\":\"string\"}",
         {"\"ab\"", "\"ba\""}, {"\"a\""}},
        {"{\"type\":\"integer\",\"multipleOf\":7,\"minimum\":-100000000,\"maximum\":100000000}",
         {"14", "-7"}, {"15"}},
        {"{\"type\":\"number\",\"multipleOf\":0.3}", {"0.6", "3"}, {"0.5"}},
        {"{\"type\":\"string\",\"pattern\":\"^a+$|^b+$\",\"minLength\":2}", {"\"aa\"", "\"bbb\""},
         {"\"a\""}},
        {"{\"type\":\"string\",\"pattern\":\"(?=a)\\\\w\"}", {"\"ab\""}, {"\"b\""}},
        /* unevaluated*: left to the check */
        {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"}],\"unevaluatedItems\":{"
         "\"type\":\"integer\"}}",
         {"[1]"}, {NULL}},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
         "\"unevaluatedProperties\":false}",
         {"{\"a\":1}", "{}"}, {NULL}},
        /* dependencies with schemas that exclude each other: merged whether or not their
         * names are written they leave no branch of anyOf; left out where their names are
         * not required, the check catches both names written */
        {DEPX, {"{\"a\":\"x\"}", "{\"b\":\"y\"}"}, {"{\"a\":\"x\",\"b\":\"y\"}"}},
        /* the one whose name is required still merged (exact: d required, b never) */
        {DEPR, {"{\"a\":\"x\",\"d\":\"z\"}"}, {NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_error_t je;
        json_t *s = json_loads(cases[i].schema, JSON_DECODE_ANY, &je);
        ck_assert_msg(s, "bad test schema %s", cases[i].schema);
        ifd_buf_t b = IFD_BUF_INIT;
        char err[256];
        bool approx = false;
        ck_assert_int_eq(ifd_gconv_json_schema(s, &b, NULL, err, sizeof err), IFD_ENOTSUP);
        b.len = 0;
        int rc = ifd_gconv_json_schema_loose(s, &b, NULL, &approx, err, sizeof err);
        ck_assert_msg(rc == 0 && approx, "%s: rc %d approx %d: %s", cases[i].schema, rc, approx, err);
        ifd_grammar_t *g = compile_ok(b.data);
        for (int k = 0; k < 2; k++) {
            const char *const *texts = k ? cases[i].caught : cases[i].valid;
            for (size_t j = 0; j < 3 && texts[j]; j++) {
                ck_assert_msg(matches_s(g, texts[j]), "%s: grammar refuses %s", cases[i].schema,
                              texts[j]);
                json_t *v = json_loads(texts[j], JSON_DECODE_ANY, &je);
                int crc = ifd_schema_check(s, v, err, sizeof err);
                ck_assert_msg(crc == (k ? IFD_EINVAL : 0), "%s: check of %s: %d (%s)",
                              cases[i].schema, texts[j], crc, err);
                json_decref(v);
            }
        }
        ifd_grammar_destroy(g);
        ifd_buf_free(&b);
        json_decref(s);
    }
    /* the tighter readings: the grammar refuses what neither then nor else allows, and
     * an array without the item contains asks for */
    static const struct {
        const char *schema, *refused;
    } tight[] = {
        {"{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"a\",\"b\"]},\"x\":{\"type\":"
         "\"integer\"},\"y\":{\"type\":\"integer\"}},\"required\":[\"k\"],\"additionalProperties\":"
         "false,\"if\":{\"properties\":{\"k\":{\"const\":\"a\"}}},\"then\":{\"required\":[\"x\"]},"
         "\"else\":{\"required\":[\"y\"]}}",
         "{\"k\":\"a\"}"},
        {"{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"a\",\"b\"]},\"x\":{\"type\":"
         "\"integer\"},\"y\":{\"type\":\"integer\"}},\"required\":[\"k\"],\"additionalProperties\":"
         "false,\"if\":{\"properties\":{\"k\":{\"const\":\"a\"}}},\"then\":{\"required\":[\"x\"]},"
         "\"else\":{\"required\":[\"y\"]}}",
         "{\"k\":\"b\",\"x\":1}"},
        {"{\"type\":\"array\",\"contains\":{\"type\":\"integer\"}}", "[]"},
        {"{\"type\":\"array\",\"contains\":{\"type\":\"integer\"},\"minContains\":2}", "[1]"},
        {"{\"type\":\"array\",\"contains\":{\"type\":\"integer\"},\"minContains\":2}", "[1,\"a\"]"},
        {"{\"type\":\"array\",\"contains\":{\"type\":\"integer\"}}", "[\"a\",\"b\"]"},
        {"{\"type\":\"array\",\"items\":{\"type\":[\"integer\",\"string\"]},\"contains\":{\"type\":"
         "\"integer\",\"minimum\":5}}",
         "[\"a\",3]"},
        {"{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"},\"contains\":{\"maximum\":0},"
         "\"$defs\":{\"n\":{\"type\":\"integer\"}},\"minItems\":1}",
         "[1,2]"},
        {"{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"a\",\"b\"]},\"x\":{\"type\":"
         "\"integer\"}},\"required\":[\"k\"],\"if\":{\"properties\":{\"k\":{\"const\":\"a\"}}},"
         "\"then\":{\"required\":[\"x\"]}}",
         "{\"k\":\"a\"}"},
        {"{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"a\",\"b\"]},\"x\":{\"type\":"
         "\"integer\"},\"y\":{\"type\":\"integer\"}},\"required\":[\"k\"],\"additionalProperties\":"
         "false,\"if\":{\"properties\":{\"k\":{\"const\":\"a\"}}},\"then\":{\"required\":[\"x\"]},"
         "\"else\":{\"required\":[\"y\"]}}",
         "{\"k\":\"a\",\"y\":2}"},
        {DISC1, "{}"},
        {DISC1, "{\"k\":\"b\",\"x\":1}"},
        {DISC1, "{\"k\":\"a\"}"},
        {DISC2, "{}"},
        {DISC2, "{\"k\":\"c\"}"},
        /* no type: a value that is no object satisfies if, so then applies to it */
        {"{\"properties\":{\"k\":{\"enum\":[\"a\",\"b\"]}},\"if\":{\"properties\":{\"k\":{"
         "\"const\":\"a\"}}},\"then\":{\"type\":[\"object\",\"string\"]},\"else\":{\"type\":"
         "[\"object\",\"integer\"]}}",
         "5"},
#define MAXC2 "{\"type\":\"array\",\"items\":{\"type\":[\"integer\",\"string\"]},\"contains\":{" \
              "\"type\":\"integer\"},\"maxContains\":2}"
        {MAXC2, "[1,2,3]"},
        {MAXC2, "[\"a\",1,\"b\",2,3]"},
        {MAXC2, "[\"a\"]"},
        {MAXC2, "[]"},
#define ONEA                                                                                       \
    "{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"contains\":{\"const\":"        \
    "\"a\"},\"minContains\":1,\"maxContains\":1,\"minItems\":2,\"maxItems\":3}"
        {ONEA, "[\"a\",\"a\"]"},
        {ONEA, "[\"b\",\"c\"]"},
        {ONEA, "[\"a\"]"},
        {ONEA, "[\"a\",\"b\",\"c\",\"b\"]"},
        {"{\"type\":\"array\",\"contains\":{\"const\":true},\"maxContains\":1}", "[true,true]"},
        {"{\"type\":\"array\",\"contains\":{\"const\":true},\"maxContains\":1}", "[1,false]"},
#define LEN34                                                                                      \
    "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"contains\":{\"minimum\":10},"          \
    "\"minItems\":3,\"maxItems\":4}"
        {LEN34, "[1,2,3]"},
        {LEN34, "[10,1]"},
        {LEN34, "[10,1,2,3,4]"},
        {DEPR, "{\"a\":\"x\"}"},
        {DEPR, "{\"a\":\"x\",\"b\":\"y\",\"d\":\"z\"}"},
        {DEPX, "{}"},
#undef MAXC2
#undef ONEA
#undef LEN34
    };
    for (size_t i = 0; i < sizeof tight / sizeof tight[0]; i++) {
        json_error_t je;
        json_t *sj = json_loads(tight[i].schema, 0, &je);
        ifd_buf_t b = IFD_BUF_INIT;
        char err[256];
        bool approx = false;
        ck_assert_int_eq(ifd_gconv_json_schema_loose(sj, &b, NULL, &approx, err, sizeof err), 0);
        ck_assert(approx);
        ifd_grammar_t *g = compile_ok(b.data);
        ck_assert_msg(!matches_s(g, tight[i].refused), "%s accepts %s", tight[i].schema,
                      tight[i].refused);
        ifd_grammar_destroy(g);
        ifd_buf_free(&b);
        json_decref(sj);
    }
    /* enforced whole: approx stays false; nothing can check these: refused */
    static const char *const exact[] = {"{\"type\":\"integer\",\"minimum\":3}",
                                        "{\"not\":{\"required\":[\"a\"]},\"properties\":{\"a\":{}}}",
                                        "{\"type\":\"array\",\"uniqueItems\":true,\"maxItems\":1}"};
    /* (the last: the grammar leaves the not out, and the check could not evaluate it) */
    static const char *const refused[] = {"{\"$dynamicRef\":\"#a\"}",
                                          "{\"$ref\":\"http://x/y.json\"}",
                                          "{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}",
                                          "{\"not\":{\"$ref\":\"http://x/y.json\"}}"};
    for (size_t k = 0; k < 2; k++) {
        const char *const *l = k ? refused : exact;
        for (size_t i = 0; i < (k ? 4u : 3u); i++) {
            json_error_t je;
            json_t *s = json_loads(l[i], 0, &je);
            ifd_buf_t b = IFD_BUF_INIT;
            char err[256];
            bool approx = true;
            int rc = ifd_gconv_json_schema_loose(s, &b, NULL, &approx, err, sizeof err);
            ck_assert_msg(k ? rc == IFD_ENOTSUP : rc == 0 && !approx, "%s: rc %d approx %d", l[i],
                          rc, approx);
            ifd_buf_free(&b);
            json_decref(s);
        }
    }
}
END_TEST

/* A random JSON value of bounded depth. */
static json_t *random_json(uint64_t *rng, int depth)
{
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    unsigned k = (unsigned)(*rng >> 33);
    switch (depth > 3 ? k % 5 : k % 7) {
    case 0:
        return json_integer((json_int_t)(k % 2000) - 1000);
    case 1:
        return json_real((double)(k % 1000) / 8.0 - 50.0);
    case 2: {
        static const char *const strs[] = {"", "a", "é\"\\\n\t", "x y", "\x01", "日本"};
        return json_string(strs[k % 6]);
    }
    case 3:
        return json_boolean(k & 8);
    case 4:
        return json_null();
    case 5: {
        json_t *a = json_array();
        for (unsigned i = 0; i < k % 4; i++)
            json_array_append_new(a, random_json(rng, depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        for (unsigned i = 0; i < k % 4; i++) {
            char key[16];
            snprintf(key, sizeof key, "k%u", i);
            json_object_set_new(o, key, random_json(rng, depth + 1));
        }
        return o;
    }
    }
}

START_TEST(test_json_object_mode)
{
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_gconv_json_object(&b), 0);
    ifd_grammar_t *g = compile_ok(b.data);
    ifd_buf_free(&b);
    uint64_t rng = 7;
    for (int t = 0; t < 300; t++) {
        json_t *o = json_object();
        json_object_set_new(o, "v", random_json(&rng, 0));
        char *s = json_dumps(o, t % 2 ? JSON_COMPACT : JSON_INDENT(2));
        ck_assert_msg(matches_s(g, s), "rejects %s", s);
        free(s);
        json_decref(o);
    }
    ck_assert(!matches_s(g, "[1]"));
    ck_assert(!matches_s(g, "{\"a\":1"));
    ck_assert(!matches_s(g, " {}"));
    ifd_grammar_destroy(g);
}
END_TEST

START_TEST(test_choice_and_tools)
{
    const char *choices[] = {"yes", "no", "maybe \"so\""};
    ifd_buf_t b = IFD_BUF_INIT;
    char err[256];
    ck_assert_int_eq(ifd_gconv_choice(choices, 3, &b, NULL, err, sizeof err), 0);
    ifd_grammar_t *g = compile_ok(b.data);
    ck_assert(matches_s(g, "yes"));
    ck_assert(matches_s(g, "maybe \"so\""));
    ck_assert(!matches_s(g, "ye"));
    ck_assert(!matches_s(g, "yesno"));
    ifd_grammar_destroy(g);
    ifd_buf_free(&b);

    json_error_t je;
    json_t *p = json_loads("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
                           "\"required\":[\"city\"]}",
                           0, &je);
    ifd_gconv_tool_t tools[] = {{"get_weather", p}, {"noop", NULL}};
    ck_assert_int_eq(ifd_gconv_tool_calls(tools, 2, 1, 0, &b, NULL, NULL, err, sizeof err), 0);
    g = compile_ok(b.data);
    ck_assert(matches_s(g, "[{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Oslo\"}}]"));
    ck_assert(matches_s(g, "[{\"name\": \"noop\", \"parameters\": {}}, {\"name\":\"noop\","
                           "\"parameters\":{\"a\":1}}]"));
    ck_assert(!matches_s(g, "[]"));
    ck_assert(!matches_s(g, "[{\"name\":\"other\",\"parameters\":{}}]"));
    ck_assert(!matches_s(g, "[{\"name\":\"get_weather\",\"parameters\":{}}]"));
    ifd_grammar_destroy(g);
    ifd_buf_free(&b);
    ck_assert_int_eq(ifd_gconv_tool_calls(tools, 2, 1, 1, &b, NULL, NULL, err, sizeof err), 0);
    g = compile_ok(b.data);
    ck_assert(!matches_s(g, "[{\"name\":\"noop\",\"parameters\":{}},{\"name\":\"noop\","
                            "\"parameters\":{}}]"));
    ifd_grammar_destroy(g);
    ifd_buf_free(&b);
    json_decref(p);
}
END_TEST

/* Mutated grammar texts never crash the compiler, and whatever compiles
 * runs on random bytes (for the sanitizer build). */
START_TEST(test_gbnf_mutations)
{
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_gconv_json_object(&b), 0);
    const char *extra[] = {"root ::= [a-z]{2,5} (\"x\" | y)*\ny ::= \"\\u00e9\" | [^\\n]\n",
                           "root ::= ( \"a\" ( \"b\" )? )+ \"c\"{0,3}\n"};
    uint64_t rng = 77;
    for (int src = 0; src < 3; src++) {
        const char *base = src == 0 ? b.data : extra[src - 1];
        size_t n = strlen(base);
        char *t = malloc(n + 8);
        for (int it = 0; it < 400; it++) {
            memcpy(t, base, n + 1);
            size_t len = n;
            for (int k = 0; k < 3 && len > 0; k++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                size_t at = (size_t)(rng >> 33) % len;
                switch ((rng >> 20) % 3) {
                case 0:
                    t[at] = "[]()\"\\|*+?{}:=-^.a \n#"[(rng >> 8) % 21];
                    break;
                case 1:
                    len = at;
                    break; /* truncate */
                default:
                    t[at] = (char)(rng >> 12);
                    break;
                }
            }
            ifd_grammar_t *g = NULL;
            char err[128];
            if (ifd_grammar_compile(t, len, &g, err, sizeof err) == 0) {
                ifd_gmatch_t *m;
                ck_assert_int_eq(ifd_gmatch_create(g, &m), 0);
                for (int j = 0; j < 40; j++) {
                    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                    char c = (char)("{}[]\":,ab 01\\"[(rng >> 33) % 13]);
                    (void)ifd_gmatch_accept(m, &c, 1);
                }
                ifd_gmatch_destroy(m);
                ifd_grammar_destroy(g);
            }
        }
        free(t);
    }
    ifd_buf_free(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("grammar");
    ifd_test_case(s, "grammar", 60,
                  IFD_TESTS(test_gbnf_basics, test_gbnf_errors, test_nullable_repetition,
                            test_regex_vs_pcre2, test_escape_dialects, test_json_schema,
                            test_json_schema_numbers, test_json_schema_formats,
                            test_json_schema_structure, test_json_schema_unsupported,
                            test_json_schema_loose, test_json_object_mode,
                            test_choice_and_tools, test_gbnf_mutations,
                            test_schema_json_wide, test_schema_rules_shared));
    return ifd_test_run(s);
}
