/*
 * test_schema_check.c — the JSON Schema check of finished outputs
 * (common/grammar/schema_check.h): each keyword on valid and invalid
 * values with the message's path; and, run as test_schema_check_suite
 * (argument --suite), the official JSON-Schema-Test-Suite's
 * draft2020-12 and draft2019-09 files, every case the checker evaluates
 * compared with the suite's verdict (the one the Python jsonschema package
 * is tested on). Cases the checker reports IFD_ENOTSUP for (remote and $id
 * references, anchors, $dynamicRef, unevaluated*) are counted, never
 * guessed. The checker asserts the formats the grammar enforces, so the
 * suite's format.json (format as an annotation) is left out and its
 * optional/format files for those formats are run instead, less the
 * A-labels that need IDNA2008's Unicode tables (IDNA_CASES). The suite is read from
 * $INFERD_JSON_SCHEMA_TEST_SUITE, else
 * ~/.cache/inferd/JSON-Schema-Test-Suite (a clone of
 * github.com/json-schema-org/JSON-Schema-Test-Suite); missing, a loud skip.
 */
#include "testutil.h"

#include "error.h"
#include "grammar/schema_check.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <stdbool.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* rc of checking the JSON text v against the JSON text s; the message in err. */
static int check_text(const char *s, const char *v, char *err, size_t errlen)
{
    json_error_t je;
    json_t *sj = json_loads(s, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je),
           *vj = json_loads(v, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    ck_assert_msg(sj && vj, "bad JSON in the test: %s / %s", s, v);
    int rc = ifd_schema_check(sj, vj, err, errlen);
    json_decref(sj);
    json_decref(vj);
    return rc;
}

typedef struct {
    const char *schema, *value;
    int rc;          /* 0 valid, IFD_EINVAL invalid, … */
    const char *msg; /* a part of the message (invalid ones) */
} case_t;

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

static const case_t CASES[] = {
    {"{\"type\":\"integer\"}", "3", 0, NULL},
    {"{\"type\":\"integer\"}", "3.0", 0, NULL},
    {"{\"type\":\"integer\"}", "3.5", IFD_EINVAL, "not of type integer"},
    {"{\"type\":[\"string\",\"null\"]}", "null", 0, NULL},
    {"{\"type\":[\"string\",\"null\"]}", "1", IFD_EINVAL, "types"},
    {"{\"enum\":[1,\"a\",{\"b\":[2]}]}", "{\"b\":[2.0]}", 0, NULL},
    {"{\"enum\":[1,\"a\"]}", "\"b\"", IFD_EINVAL, "enum"},
    {"{\"const\":[1,{\"a\":null}]}", "[1,{\"a\":null}]", 0, NULL},
    {"{\"const\":[1,{\"a\":null}]}", "[1,{\"a\":false}]", IFD_EINVAL, "const"},
    /* numbers: inclusive and exclusive bounds, draft-04's booleans */
    {"{\"minimum\":0.5,\"maximum\":2}", "0.5", 0, NULL},
    {"{\"minimum\":0.5,\"maximum\":2}", "0.4999", IFD_EINVAL, "minimum"},
    {"{\"minimum\":0.5,\"maximum\":2}", "2.0001", IFD_EINVAL, "maximum"},
    {"{\"exclusiveMinimum\":0.0001}", "0.0001", IFD_EINVAL, "exclusiveMinimum"},
    {"{\"exclusiveMinimum\":0.0001}", "0.00011", 0, NULL},
    {"{\"minimum\":1,\"exclusiveMinimum\":true}", "1", IFD_EINVAL, "minimum"},
    {"{\"maximum\":1,\"exclusiveMaximum\":true}", "0.99", 0, NULL},
    {"{\"multipleOf\":0.01}", "0.07", 0, NULL},
    {"{\"multipleOf\":0.01}", "0.075", IFD_EINVAL, "multiple"},
    {"{\"multipleOf\":7}", "-21", 0, NULL},
    {"{\"multipleOf\":7}", "22", IFD_EINVAL, "multiple of 7"},
    {"{\"minimum\":5}", "\"not a number\"", 0, NULL}, /* keywords of other types */
    /* strings: lengths in characters, pattern as a search */
    {"{\"minLength\":2,\"maxLength\":3}", "\"\xc3\xa9\xc3\xa9\"", 0, NULL},
    {"{\"maxLength\":3}", "\"abcd\"", IFD_EINVAL, "maxLength"},
    {"{\"pattern\":\"[0-9]{3}\"}", "\"ab123\"", 0, NULL},
    {"{\"pattern\":\"^[0-9]{3}$\"}", "\"ab123\"", IFD_EINVAL, "pattern"},
    /* formats: the grammar's own asserted (schema_format.h), others annotations */
    {"{\"format\":\"email\"}", "\"not an email\"", IFD_EINVAL, "not a valid 'email'"},
    {"{\"format\":\"email\"}", "\"a.b+c@example.co\"", 0, NULL},
    {"{\"format\":\"email\"}", "1", 0, NULL}, /* formats apply to strings only */
    {"{\"format\":\"date\"}", "\"2024-02-29\"", 0, NULL},
    {"{\"format\":\"date\"}", "\"2023-02-29\"", IFD_EINVAL, "'date'"},
    {"{\"format\":\"date-time\"}", "\"2023-02-28T23:59:60Z\"", 0, NULL},
    {"{\"format\":\"date-time\"}", "\"2023-02-28T12:00:60Z\"", IFD_EINVAL, "'date-time'"},
    {"{\"format\":\"time\"}", "\"12:00:00\"", IFD_EINVAL, "'time'"}, /* no offset */
    {"{\"format\":\"duration\"}", "\"P1Y2D\"", IFD_EINVAL, "'duration'"},
    {"{\"format\":\"duration\"}", "\"P1Y2M3DT4H\"", 0, NULL},
    {"{\"format\":\"hostname\"}", "\"ab--cd.com\"", IFD_EINVAL, "'hostname'"},
    {"{\"format\":\"ipv6\"}", "\"::ffff:1.2.3.4\"", 0, NULL},
    {"{\"format\":\"uri\"}", "\"/relative\"", IFD_EINVAL, "'uri'"},
    {"{\"format\":\"uri-reference\"}", "\"/relative?q#f\"", 0, NULL},
    {"{\"format\":\"uuid\"}", "\"0123abcd-0000-0000-0000-00000000000g\"", IFD_EINVAL, "'uuid'"},
    {"{\"format\":\"color\"}", "\"anything\"", 0, NULL},
    {"{\"format\":\"iri\"}", "\"http://\u00e9x.com/\u00fcber?q=\ue000\"", 0, NULL},
    {"{\"format\":\"iri\"}", "\"http://x.com/\ue000\"", IFD_EINVAL,
     "'iri'"}, /* private: query only */
    {"{\"format\":\"iri\"}", "\"/\u00fcber\"", IFD_EINVAL, "'iri'"},
    {"{\"format\":\"iri-reference\"}", "\"/\u00fcber#x\"", 0, NULL},
    {"{\"format\":\"json-pointer\"}", "\"/a~1b/~0/0\"", 0, NULL},
    {"{\"format\":\"json-pointer\"}", "\"\"", 0, NULL},
    {"{\"format\":\"json-pointer\"}", "\"/a~2\"", IFD_EINVAL, "'json-pointer'"},
    {"{\"format\":\"json-pointer\"}", "\"a/b\"", IFD_EINVAL, "'json-pointer'"},
    {"{\"format\":\"relative-json-pointer\"}", "\"0#\"", 0, NULL},
    {"{\"format\":\"relative-json-pointer\"}", "\"12/a\"", 0, NULL},
    {"{\"format\":\"relative-json-pointer\"}", "\"01\"", IFD_EINVAL, "'relative-json-pointer'"},
    {"{\"format\":\"relative-json-pointer\"}", "\"/a\"", IFD_EINVAL, "'relative-json-pointer'"},
    {"{\"format\":\"regex\"}", "\"^[a-z]+(x|y)?$\"", 0, NULL},
    {"{\"format\":\"regex\"}", "\"(a\"", IFD_EINVAL, "'regex'"},
    {"{\"format\":\"ipv4\"}", "\"1.2.3.4 \"", IFD_EINVAL, "'ipv4'"},
    /* RFC 6531: non-ASCII in the local part, an ASCII domain (U-labels fail: IDNA2008) */
    {"{\"format\":\"idn-email\"}", "\"\u00e9l\u00e8ve@example.com\"", 0, NULL},
    {"{\"format\":\"idn-email\"}", "\"a.b@c.de\"", 0, NULL},
    {"{\"format\":\"idn-email\"}", "\"\\\"\u00e9 x\\\"@c.de\"", 0, NULL},
    {"{\"format\":\"idn-email\"}", "\"a@\u00e9x.com\"", IFD_EINVAL, "'idn-email'"},
    {"{\"format\":\"idn-email\"}", "\"a..b@c.de\"", IFD_EINVAL, "'idn-email'"},
    {"{\"format\":\"idn-email\"}", "\"no-at.example\"", IFD_EINVAL, "'idn-email'"},
    {"{\"format\":\"idn-hostname\"}", "\"xn--bcher-kva.example\"", 0, NULL},
    {"{\"format\":\"idn-hostname\"}", "\"b\u00fccher.example\"", IFD_EINVAL, "'idn-hostname'"},
    {"{\"format\":\"idn-hostname\"}", "\"-a.com\"", IFD_EINVAL, "'idn-hostname'"},
    /* RFC 6570 */
    {"{\"format\":\"uri-template\"}", "\"http://e.com/{+path}/x{?q,lang:2}{#f*}\"", 0, NULL},
    {"{\"format\":\"uri-template\"}", "\"/{a.b}%20\u00e9\"", 0, NULL},
    {"{\"format\":\"uri-template\"}", "\"/{a\"", IFD_EINVAL, "'uri-template'"},
    {"{\"format\":\"uri-template\"}", "\"/{a:0}\"", IFD_EINVAL, "'uri-template'"},
    {"{\"format\":\"uri-template\"}", "\"/{.a.}\"", IFD_EINVAL, "'uri-template'"},
    {"{\"format\":\"uri-template\"}", "\"a b\"", IFD_EINVAL, "'uri-template'"},
    {"{\"format\":\"uri-template\"}", "\"%zz\"", IFD_EINVAL, "'uri-template'"},
    /* JSONSchemaBench's false 500: oneOf branches that differ only by their format */
    {"{\"oneOf\":[{\"type\":\"string\",\"format\":\"date\"},"
     "{\"type\":\"string\",\"format\":\"date-time\"}]}",
     "\"2024-01-02\"", 0, NULL},
    {"{\"oneOf\":[{\"format\":\"ipv4\"},{\"format\":\"ipv6\"}]}", "\"::1\"", 0, NULL},
    /* arrays */
    {"{\"items\":{\"type\":\"integer\"}}", "[1,2,\"x\"]", IFD_EINVAL, "/2: not of type integer"},
    {"{\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"integer\"}}", "[\"a\",2]", 0,
     NULL},
    {"{\"prefixItems\":[{\"type\":\"string\"}],\"items\":false}", "[\"a\",2]", IFD_EINVAL, "/1"},
    {"{\"items\":[{\"type\":\"string\"}],\"additionalItems\":false}", "[\"a\",2]", IFD_EINVAL,
     "/1"},
    {"{\"minItems\":2,\"maxItems\":2}", "[1]", IFD_EINVAL, "minItems"},
    {"{\"uniqueItems\":true}", "[1,{\"a\":1},1.0]", IFD_EINVAL, "items 0 and 2"},
    {"{\"uniqueItems\":true}", "[1,{\"a\":1},true]", 0, NULL},
    {"{\"contains\":{\"const\":3}}", "[1,2]", IFD_EINVAL, "contains"},
    {"{\"contains\":{\"const\":3},\"maxContains\":1}", "[3,3]", IFD_EINVAL, "more than 1"},
    {"{\"contains\":{\"const\":3},\"minContains\":0}", "[]", 0, NULL},
    /* objects */
    {"{\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]}", "{\"b\":1}", IFD_EINVAL,
     "'a' is missing"},
    {"{\"properties\":{\"a/b\":{\"type\":\"string\"}}}", "{\"a/b\":1}", IFD_EINVAL, "/a~1b:"},
    {"{\"properties\":{\"a\":{}},\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}},"
     "\"additionalProperties\":false}",
     "{\"a\":1,\"x-y\":2}", 0, NULL},
    {"{\"properties\":{\"a\":{}},\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}},"
     "\"additionalProperties\":false}",
     "{\"a\":1,\"y\":2}", IFD_EINVAL, "/y: not allowed"},
    {"{\"additionalProperties\":{\"type\":\"integer\"}}", "{\"y\":\"s\"}", IFD_EINVAL, "/y"},
    {"{\"minProperties\":1}", "{}", IFD_EINVAL, "minProperties"},
    {"{\"maxProperties\":1}", "{\"a\":1,\"b\":2}", IFD_EINVAL, "maxProperties"},
    {"{\"propertyNames\":{\"maxLength\":2}}", "{\"abc\":1}", IFD_EINVAL, "/abc"},
    {"{\"dependentRequired\":{\"a\":[\"b\"]}}", "{\"a\":1}", IFD_EINVAL, "'b' is missing"},
    {"{\"dependencies\":{\"a\":{\"required\":[\"c\"]}}}", "{\"a\":1,\"c\":2}", 0, NULL},
    {"{\"dependentSchemas\":{\"a\":{\"maxProperties\":1}}}", "{\"a\":1,\"c\":2}", IFD_EINVAL,
     "maxProperties"},
    /* combinators */
    {"{\"allOf\":[{\"minimum\":1},{\"maximum\":2}]}", "3", IFD_EINVAL, "maximum"},
    {"{\"anyOf\":[{\"type\":\"string\"},{\"minimum\":2}]}", "1", IFD_EINVAL, "anyOf"},
    {"{\"oneOf\":[{\"type\":\"integer\"},{\"minimum\":2}]}", "3", IFD_EINVAL, "more than one"},
    {"{\"oneOf\":[{\"type\":\"integer\"},{\"minimum\":2}]}", "2.5", 0, NULL},
    {"{\"not\":{\"type\":\"string\"}}", "\"s\"", IFD_EINVAL, "'not'"},
    {"{\"if\":{\"properties\":{\"k\":{\"const\":1}}},\"then\":{\"required\":[\"a\"]},"
     "\"else\":{\"required\":[\"b\"]}}",
     "{\"k\":1,\"b\":0}", IFD_EINVAL, "'a' is missing"},
    {"{\"if\":{\"properties\":{\"k\":{\"const\":1}}},\"then\":{\"required\":[\"a\"]},"
     "\"else\":{\"required\":[\"b\"]}}",
     "{\"k\":2,\"b\":0}", 0, NULL},
    {"{\"nullable\":true,\"type\":\"string\"}", "null", 0, NULL},
    {"false", "1", IFD_EINVAL, "false schema"},
    /* references: local, recursive, with siblings applied */
    {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":\"#/$defs/n\"},"
     "\"v\":{\"type\":\"integer\"}}}},\"$ref\":\"#/$defs/n\"}",
     "{\"next\":{\"next\":{\"v\":\"x\"}}}", IFD_EINVAL, "/next/next/v"},
    {"{\"$defs\":{\"s\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/s\",\"maxLength\":1}", "\"ab\"",
     IFD_EINVAL, "maxLength"},
    /* anchors, draft-04 ids, percent-encoded pointers, embedded resources (one name
     * anchored twice in one resource names nothing) */
    {REF_ANCHOR, "{\"a\":2}", IFD_EINVAL, "minimum"},
    {REF_ANCHOR, "{\"a\":3}", 0, NULL},
    {REF_ID04, "[\"abc\"]", IFD_EINVAL, "/0"},
    {REF_RES, "{\"p\":true,\"q\":6,\"r\":1}", IFD_EINVAL, "/q"},
    {REF_RES, "{\"p\":true,\"q\":1,\"r\":6}", IFD_EINVAL, "/r"},
    {REF_RES, "{\"p\":true,\"q\":5,\"r\":-1}", 0, NULL},
    {REF_RES, "{\"p\":0,\"q\":5,\"r\":-1}", IFD_EINVAL, "/p"},
    {"{\"$defs\":{\"a\":{\"$anchor\":\"x\",\"type\":\"integer\"},\"b\":{\"$anchor\":\"x\",\"ty"
     "pe\":\"string\"}},\"$ref\":\"#x\"}",
     "1", IFD_ENOTSUP, "not a local reference"},
    /* a NUL in a pattern is part of it (read with its length) */
    {"{\"pattern\":\"^a\\u0000b$\"}", "\"a\\u0000b\"", 0, NULL},
    {"{\"pattern\":\"^a\\u0000b$\"}", "\"ab\"", IFD_EINVAL, "pattern"},
    {"{\"pattern\":\"^[^\\u0000]+$\"}", "\"x\\u0000\"", IFD_EINVAL, "pattern"},
    /* unevaluated*: what properties, patternProperties, additionalProperties, items,
     * prefixItems, contains and the passing in-place subschemas (allOf, anyOf / oneOf
     * branches, if / then / else, dependentSchemas, $ref) did not evaluate */
    {"{\"properties\":{\"a\":{}},\"unevaluatedProperties\":false}", "{\"a\":1,\"b\":2}",
     IFD_EINVAL, "/b: not allowed ('unevaluatedProperties')"},
    {"{\"properties\":{\"a\":{}},\"unevaluatedProperties\":false}", "{\"a\":1}", 0, NULL},
    {"{\"allOf\":[{\"properties\":{\"a\":{}}}],\"unevaluatedProperties\":false}",
     "{\"a\":1}", 0, NULL},
    {"{\"anyOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}}},{\"properties\":{\"b\":{"
     "\"type\":\"string\"}}}],\"unevaluatedProperties\":false}",
     "{\"a\":1,\"b\":2}", IFD_EINVAL, "/b"},
    {"{\"anyOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}}},{\"properties\":{\"b\":{"
     "\"type\":\"string\"}}}],\"unevaluatedProperties\":false}",
     "{\"a\":1,\"b\":\"x\"}", 0, NULL},
    {"{\"if\":{\"properties\":{\"k\":{\"const\":1}}},\"then\":{\"properties\":{\"t\":{}}},"
     "\"else\":{\"properties\":{\"e\":{}}},\"unevaluatedProperties\":false}",
     "{\"k\":1,\"e\":0}", IFD_EINVAL, "/e"},
    {"{\"if\":{\"properties\":{\"k\":{\"const\":1}}},\"then\":{\"properties\":{\"t\":{}}},"
     "\"else\":{\"properties\":{\"e\":{}}},\"unevaluatedProperties\":false}",
     "{\"k\":1,\"t\":0}", 0, NULL},
    {"{\"$defs\":{\"p\":{\"properties\":{\"a\":{}}}},\"$ref\":\"#/$defs/p\","
     "\"unevaluatedProperties\":{\"type\":\"string\"}}",
     "{\"a\":1,\"z\":\"s\"}", 0, NULL},
    {"{\"prefixItems\":[{}],\"unevaluatedItems\":{\"type\":\"integer\"}}", "[\"x\",1]", 0,
     NULL},
    {"{\"prefixItems\":[{}],\"unevaluatedItems\":{\"type\":\"integer\"}}", "[1,\"x\"]",
     IFD_EINVAL, "/1"},
    {"{\"contains\":{\"type\":\"string\"},\"unevaluatedItems\":false}", "[\"a\",\"b\"]", 0,
     NULL},
    {"{\"contains\":{\"type\":\"string\"},\"unevaluatedItems\":false}", "[\"a\",2]",
     IFD_EINVAL, "/1"},
    /* a fragment inside an embedded resource is read in that resource first */
    {"{\"$id\":\"https://x.test/r\",\"$defs\":{\"c\":{\"$id\":\"c\",\"type\":\"array\","
     "\"items\":{\"anyOf\":[{\"type\":\"integer\"},{\"$ref\":\"#\"}]}}},\"type\":\"object\","
     "\"properties\":{\"x\":{\"$ref\":\"c\"}}}",
     "{\"x\":[1,[2,[3]]]}", 0, NULL}, /* ("#" read at the root: [2,…] no object) */
    {"{\"$id\":\"https://x.test/r\",\"$defs\":{\"c\":{\"$id\":\"c\",\"type\":\"array\","
     "\"items\":{\"anyOf\":[{\"type\":\"integer\"},{\"$ref\":\"#\"}]}}},\"type\":\"object\","
     "\"properties\":{\"x\":{\"$ref\":\"c\"}}}",
     "{\"x\":[1,[2,[\"y\"]]]}", IFD_EINVAL, "anyOf"},
    /* what it cannot evaluate */
    {"{\"$ref\":\"http://example.com/s.json\"}", "1", IFD_ENOTSUP, "not a local reference"},
    {"{\"$dynamicRef\":\"#a\"}", "{}", IFD_ENOTSUP, "$dynamicRef"},
    {"{\"pattern\":\"(\"}", "\"x\"", IFD_ENOTSUP, "PCRE2"},
    /* catastrophic backtracking stops at the match limit: unchecked */
    {"{\"pattern\":\"^(\\\\w+\\\\s?)+$\"}", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!\"",
     IFD_ENOTSUP, "could not be run"},
    {"{\"minLength\":-1}", "\"x\"", IFD_ENOTSUP, "non-negative"},
    {"3", "1", IFD_ENOTSUP, "object or a boolean"},
};

START_TEST(test_keywords)
{
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const case_t *t = &CASES[i];
        char err[256] = "x";
        int rc = check_text(t->schema, t->value, err, sizeof err);
        ck_assert_msg(rc == t->rc, "%s on %s: %s (%s), expected %s", t->schema, t->value,
                      ifd_err_name(rc), err, ifd_err_name(t->rc));
        if (t->msg)
            ck_assert_msg(strstr(err, t->msg), "%s on %s: message '%s' lacks '%s'", t->schema,
                          t->value, err, t->msg);
        else
            ck_assert_str_eq(err, "");
    }
}
END_TEST

/* A recursive $ref that never reaches a value, and an anyOf tower whose
 * work doubles per level, end at the limits instead of running on. */
START_TEST(test_limits)
{
    char err[256];
    ck_assert_int_eq(check_text("{\"$ref\":\"#\"}", "1", err, sizeof err), IFD_ETOOBIG);
    json_t *s = json_true();
    for (int i = 0; i < 40; i++)
        s = json_pack("{s:[o,O]}", "anyOf", json_pack("{s:o}", "not", s), json_false());
    json_t *v = json_integer(1);
    int rc = ifd_schema_check(s, v, err, sizeof err);
    ck_assert_msg(rc == IFD_ETOOBIG || rc == 0 || rc == IFD_EINVAL, "%s", ifd_err_name(rc));
    json_decref(s);
    json_decref(v);
    /* texts: a cut output is not JSON (invalid); a number beyond a double's range is
     * JSON that jansson cannot hold (unchecked) */
    json_t *any = json_object();
    ck_assert_int_eq(ifd_schema_check_text(any, "{\"a\":", 5, err, sizeof err), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "not JSON"));
    ck_assert_int_eq(ifd_schema_check_text(any, "[1e999]", 7, err, sizeof err), IFD_ENOTSUP);
    ck_assert_int_eq(ifd_schema_check_text(any, "[\"a\\u0000\"]", 11, err, sizeof err), 0);
    json_decref(any);
    /* what the check can evaluate, whatever the value */
    static const struct {
        const char *schema;
        int rc;
    } sup[] = {
        {"{\"not\":{\"$ref\":\"http://x/y.json\"}}", IFD_ENOTSUP},
        {"{\"$defs\":{\"a\":{\"$recursiveRef\":\"#\"}}}", IFD_ENOTSUP},
        {"{\"$defs\":{\"a\":{\"unevaluatedProperties\":false}}}", 0},
        {"{\"items\":[{\"pattern\":\"(\"}]}", IFD_ENOTSUP},
        {"{\"patternProperties\":{\"(\":{}}}", IFD_ENOTSUP},
        {"{\"enum\":[{\"$ref\":\"http://x\"}],\"default\":{\"$dynamicRef\":\"#a\"}}", 0},
        {"{\"pattern\":\"(?<=a)b\",\"$defs\":{\"n\":{\"$ref\":\"#/$defs/n\"}}}", 0},
    };
    for (size_t i = 0; i < sizeof sup / sizeof sup[0]; i++) {
        json_error_t je;
        json_t *sj = json_loads(sup[i].schema, 0, &je);
        int rc = ifd_schema_check_supported(sj, err, sizeof err);
        ck_assert_msg(rc == sup[i].rc, "%s: %s (%s)", sup[i].schema, ifd_err_name(rc), err);
        json_decref(sj);
    }
    /* no message buffer at all */
    ck_assert_int_eq(check_text("{\"type\":\"string\"}", "1", NULL, 0), IFD_EINVAL);
}
END_TEST

/* ipv4 and ipv6 against glibc's inet_pton on random strings over their
 * alphabets (the same text forms: dotted quads without leading zeros, RFC
 * 4291's groups, "::" and an IPv4 tail, no zone); the other formats on
 * random strings only for the sanitizers (no verdict to compare with). */
START_TEST(test_formats_random)
{
    static const struct {
        const char *format, *alphabet;
        int af; /* 0: no oracle */
    } F[] = {
        {"ipv4", "0123456789.", AF_INET},     {"ipv6", "0123456789abcdefABCDEF:.", AF_INET6},
        {"ipv6", "01f:.", AF_INET6},          {"hostname", "ab1-.xn-", 0},
        {"email", "a.\"@[]:-1IPv6", 0},       {"uri", "ab:/?#[]@%1f.-", 0},
        {"uri-reference", "a:/?#[]@%1.v", 0}, {"duration", "P1TYMDHSW", 0},
        {"date-time", "0129-:TZ.+", 0},
    };
    uint64_t rng = 42;
    unsigned compared = 0;
    for (size_t f = 0; f < sizeof F / sizeof F[0]; f++) {
        char sch[64];
        snprintf(sch, sizeof sch, "{\"format\":\"%s\"}", F[f].format);
        json_error_t je;
        json_t *schema = json_loads(sch, 0, &je);
        size_t na = strlen(F[f].alphabet);
        for (int i = 0; i < 20000; i++) {
            char buf[48];
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t n = (size_t)(rng >> 33) % 40;
            for (size_t k = 0; k < n; k++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                buf[k] = F[f].alphabet[(rng >> 33) % na];
            }
            buf[n] = '\0';
            json_t *v = json_stringn(buf, n);
            char err[256];
            int rc = ifd_schema_check(schema, v, err, sizeof err);
            json_decref(v);
            ck_assert(rc == 0 || rc == IFD_EINVAL);
            if (!F[f].af)
                continue;
            unsigned char addr[16];
            int want = inet_pton(F[f].af, buf, addr) == 1;
            ck_assert_msg((rc == 0) == want, "%s '%s': check %s, inet_pton %s", F[f].format, buf,
                          rc ? "invalid" : "valid", want ? "valid" : "invalid");
            compared += want;
        }
        json_decref(schema);
    }
    ck_assert_uint_ge(compared, 50); /* the random strings hit valid addresses too */
}
END_TEST

/* ---- JSON-Schema-Test-Suite ---- */

typedef struct {
    unsigned agree, disagree, unsupported, idna;
} tally_t;

/* The optional/format files of the formats the checker asserts (schema_format.h). */
static const char *const FORMAT_FILES[] = {
    "date",          "time",     "date-time",     "duration",     "uuid",
    "email",         "hostname", "ipv4",          "ipv6",         "uri",
    "uri-reference", "iri",      "iri-reference", "json-pointer", "relative-json-pointer",
    "regex",         "idn-email", "uri-template"};

/* hostname.json's A-labels whose verdict rests on IDNA2008's rules per
 * code point (RFC 5892's tables of Unicode properties) or on the decoded
 * U-label (its "--" in the third and fourth places), which the checker does
 * not evaluate (it checks that an A-label decodes as Punycode): counted
 * apart, never compared. */
static const char *const IDNA_CASES[] = {
    "xn--07jt112bpxg.xn--9t4b11yi5a",
    "xn--hello-txk",
    "xn--hello-zed",
    "xn--hello-6bf",
    "xn--chb89f",
    "xn--07jceefgh4c",
    "xn--al-0ea",
    "xn--l-fda",
    "xn--la-0ea",
    "xn--l-gda",
    "xn--S-jib3p",
    "xn--wva3j",
    "xn--A-2hc5h",
    "xn--5db1e",
    "xn--A-2hc8h",
    "xn--5db3e",
    "xn--defabc-k64e",
    "xn--vek",
    "xn--ngb6iyr",
    "xn--11b2er09f",
    "xn--02b508i",
    "XN--aa---o47jg78q",
};

static bool idna_case(const char *path, const json_t *data)
{
    /* an idn-email whose domain holds a U-label: the check refuses it (IDNA2008) */
    const char *at = json_is_string(data) ? strrchr(json_string_value(data), '@') : NULL;
    if (strstr(path, "optional/format/idn-email.json") && at)
        for (; *at; at++)
            if ((unsigned char)*at >= 0x80)
                return true;
    if (!strstr(path, "optional/format/hostname.json") || !json_is_string(data))
        return false;
    for (size_t i = 0; i < sizeof IDNA_CASES / sizeof IDNA_CASES[0]; i++)
        if (strcmp(json_string_value(data), IDNA_CASES[i]) == 0)
            return true;
    return false;
}

static void suite_file(const char *path, tally_t *t)
{
    json_error_t je;
    json_t *groups = json_load_file(path, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    ck_assert_msg(groups, "%s: %s", path, je.text);
    size_t i, j;
    json_t *g, *c;
    json_array_foreach(groups, i, g)
    {
        const json_t *schema = json_object_get(g, "schema");
        json_array_foreach(json_object_get(g, "tests"), j, c)
        {
            char err[256];
            if (idna_case(path, json_object_get(c, "data"))) {
                t->idna++;
                continue;
            }
            int rc = ifd_schema_check(schema, json_object_get(c, "data"), err, sizeof err);
            bool valid = json_is_true(json_object_get(c, "valid"));
            if (rc == IFD_ENOTSUP || rc == IFD_ETOOBIG) {
                t->unsupported++;
                if (getenv("SCHEMA_CHECK_VERBOSE"))
                    fprintf(stderr, "NOT EVALUATED %s: %s\n", path, err);
            } else if ((rc == 0) == valid) {
                t->agree++;
            } else {
                t->disagree++;
                fprintf(stderr, "DISAGREE %s: %s / %s: %s (%s)\n", path,
                        json_string_value(json_object_get(g, "description")),
                        json_string_value(json_object_get(c, "description")),
                        valid ? "valid" : "invalid", err);
            }
        }
    }
    json_decref(groups);
}

static const char *g_suite;

START_TEST(test_official_suite)
{
    static const char *const drafts[] = {"draft2020-12", "draft2019-09"};
    tally_t t = {0};
    for (size_t d = 0; d < 2; d++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/tests/%s", g_suite, drafts[d]);
        DIR *dh = opendir(dir);
        ck_assert_msg(dh, "%s: missing", dir);
        struct dirent *e;
        while ((e = readdir(dh))) {
            size_t n = strlen(e->d_name);
            /* vocabulary.json: a custom metaschema turning validation off,
             * which the checker does not read (it always validates);
             * format.json: format as an annotation, where the checker
             * asserts the grammar's formats (the optional files below) */
            if (n < 6 || strcmp(e->d_name + n - 5, ".json") != 0 ||
                strcmp(e->d_name, "vocabulary.json") == 0 || strcmp(e->d_name, "format.json") == 0)
                continue;
            char path[2048];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            suite_file(path, &t);
        }
        closedir(dh);
        for (size_t f = 0; f < sizeof FORMAT_FILES / sizeof FORMAT_FILES[0]; f++) {
            char path[2048];
            snprintf(path, sizeof path, "%s/optional/format/%s.json", dir, FORMAT_FILES[f]);
            suite_file(path, &t);
        }
    }
    fprintf(stderr,
            "JSON-Schema-Test-Suite: %u agree, %u disagree, %u not evaluated, %u IDNA2008 "
            "A-labels and U-label domains left out\n",
            t.agree, t.disagree, t.unsupported, t.idna);
    ck_assert_uint_eq(t.disagree, 0);
    ck_assert_uint_ge(t.agree, 1900); /* most of the suite is evaluated */
}
END_TEST

int main(int argc, char **argv)
{
    Suite *s = suite_create("schema_check");
    if (argc == 2 && strcmp(argv[1], "--suite") == 0) {
        static char dir[900];
        const char *env = getenv("INFERD_JSON_SCHEMA_TEST_SUITE"), *home = getenv("HOME");
        snprintf(dir, sizeof dir, "%s%s",
                 env    ? env
                 : home ? home
                        : "",
                 env ? "" : "/.cache/inferd/JSON-Schema-Test-Suite");
        g_suite = dir;
        char probe[1024];
        snprintf(probe, sizeof probe, "%s/tests/draft2020-12/type.json", g_suite);
        FILE *f = fopen(probe, "r");
        if (!f)
            ifd_test_skip("JSON-Schema-Test-Suite not found at %s (a clone of "
                          "github.com/json-schema-org/JSON-Schema-Test-Suite; set "
                          "INFERD_JSON_SCHEMA_TEST_SUITE)",
                          g_suite);
        fclose(f);
        ifd_test_case(s, "suite", 120, IFD_TESTS(test_official_suite));
    } else {
        ifd_test_case(s, "keywords", 60,
                      IFD_TESTS(test_keywords, test_limits, test_formats_random));
    }
    return ifd_test_run(s);
}
