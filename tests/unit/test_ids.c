/*
 * test_ids.c — the daemon's ids (daemon/ids.h): every kind's shape (prefix
 * and 32 hex digits: 128 bits), 10000 ids distinct with no two sharing 48
 * leading bits, tool call ids the same; seeds seeded from getrandom (two
 * seedings differ), a seed state giving the same seeds again.
 */
#include "testutil.h"

#include "daemon/ids.h"
#include "error.h"

#include <stdlib.h>
#include <string.h>

static bool all_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return s[n] == '\0';
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

START_TEST(test_shapes)
{
    static const struct {
        ifd_oai_kind_t kind;
        const char *prefix;
    } k[] = {{IFD_OAI_CHAT, "chatcmpl-"}, {IFD_OAI_COMPLETION, "cmpl-"},
             {IFD_OAI_RESPONSES, "resp_"}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char id[IFD_OAI_ID_MAX];
        ck_assert_int_eq(ifd_ids_make(id, k[i].kind), 0);
        size_t pl = strlen(k[i].prefix);
        ck_assert_int_eq(strncmp(id, k[i].prefix, pl), 0);
        ck_assert_msg(all_hex(id + pl, IFD_IDS_BITS / 4), "%s", id);
    }
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    int rc = -1;
    char *call = ifd_ids_tool_call(&a, &rc);
    ck_assert_ptr_nonnull(call);
    ck_assert_int_eq(strncmp(call, "call_", 5), 0);
    ck_assert_msg(all_hex(call + 5, IFD_IDS_BITS / 4), "%s", call);
    ifd_arena_close(&a);
}
END_TEST

START_TEST(test_distinct)
{
    enum { N = 10000 };
    char **v = malloc(N * sizeof *v);
    ck_assert_ptr_nonnull(v);
    for (int i = 0; i < N; i++) {
        v[i] = malloc(IFD_OAI_ID_MAX);
        ck_assert_int_eq(ifd_ids_make(v[i], IFD_OAI_RESPONSES), 0);
    }
    qsort(v, N, sizeof *v, cmp_str);
    for (int i = 1; i < N; i++) /* "resp_" + 12 hex digits: 48 bits */
        ck_assert_msg(strncmp(v[i - 1], v[i], 5 + 12) != 0, "%s %s", v[i - 1], v[i]);
    for (int i = 0; i < N; i++)
        free(v[i]);
    free(v);
}
END_TEST

START_TEST(test_seeds)
{
    uint64_t s1 = 0, s2 = 0;
    ck_assert_int_eq(ifd_ids_seed(&s1), 0);
    ck_assert_int_eq(ifd_ids_seed(&s2), 0);
    ck_assert(s1 != s2); /* 2^-64 */
    uint64_t a = s1, b = s1;
    for (int i = 0; i < 100; i++)
        ck_assert(ifd_ids_random(&a) == ifd_ids_random(&b)); /* a state is its seeds */
    unsigned char buf[64] = {0}, zero[64] = {0};
    ck_assert_int_eq(ifd_ids_fill(buf, sizeof buf), 0);
    ck_assert(memcmp(buf, zero, sizeof buf) != 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ids");
    TCase *tc = tcase_create("ids");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_shapes);
    tcase_add_test(tc, test_distinct);
    tcase_add_test(tc, test_seeds);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
