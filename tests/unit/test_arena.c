/* test_arena.c — arena alignment, growth, reset; buffer growth and printf. */
#include "testutil.h"

#include "arena.h"
#include "error.h"

#include <stdint.h>
#include <string.h>

START_TEST(test_arena_alignment_and_big_allocations)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 256);
    for (int i = 1; i < 200; i++) {
        unsigned char *p = ifd_arena_alloc(&a, (size_t)i);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq((uintptr_t)p % 16, 0);
        memset(p, 0xab, (size_t)i);
    }
    void *big = ifd_arena_alloc_aligned(&a, 100000, 4096);
    ck_assert_ptr_nonnull(big);
    ck_assert_uint_eq((uintptr_t)big % 4096, 0);
    memset(big, 1, 100000);
    ck_assert_ptr_null(ifd_arena_alloc_aligned(&a, 8, 3));
    ck_assert_ptr_null(ifd_arena_alloc(&a, SIZE_MAX - 8));
    char *s = ifd_arena_sprintf(&a, "%s-%d", "req", 42);
    ck_assert_str_eq(s, "req-42");
    ck_assert_str_eq(ifd_arena_strndup(&a, "abcdef", 3), "abc");
    int *z = ifd_arena_calloc(&a, 10, sizeof(int));
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(z[i], 0);
    ck_assert_ptr_null(ifd_arena_calloc(&a, SIZE_MAX / 2, 4));
    ifd_arena_reset(&a);
    ck_assert_uint_eq(a.total, 0);
    ck_assert_ptr_nonnull(ifd_arena_alloc(&a, 10));
    ifd_arena_close(&a);
}
END_TEST

START_TEST(test_buf_append_printf_consume)
{
    ifd_buf_t b = IFD_BUF_INIT;
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(ifd_buf_printf(&b, "%d,", i), 0);
    ck_assert_uint_eq(strlen(b.data), b.len);
    ck_assert(strncmp(b.data, "0,1,2,", 6) == 0);
    ifd_buf_consume(&b, 2);
    ck_assert(strncmp(b.data, "1,2,", 4) == 0);
    ifd_buf_clear(&b);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(b.data, "");
    ck_assert_int_eq(ifd_buf_append(&b, "x\0y", 3), 0);
    ck_assert_uint_eq(b.len, 3);
    ck_assert_int_eq(ifd_buf_reserve(&b, SIZE_MAX), IFD_EOVERFLOW);
    ifd_buf_free(&b);
    ck_assert_ptr_null(b.data);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("arena");
    ifd_test_case(
        s, "arena", 0,
        IFD_TESTS(test_arena_alignment_and_big_allocations, test_buf_append_printf_consume));
    return ifd_test_run(s);
}
