/*
 * test_gcache.c — the router's grammar cache (daemon/gcache.h): words come
 * back as stored, the parsed schema beside them as a new reference that
 * outlives its entry (eviction by bytes, replacement, destroy release only
 * the cache's own reference), the schema counts against the cache's bytes,
 * and hits / misses are counted.
 */
#include "testutil.h"

#include "daemon/gcache.h"

#include <jansson.h>
#include <string.h>

START_TEST(test_words_and_schema)
{
    ifd_gcache_t *c;
    ck_assert_int_eq(ifd_gcache_create(&c, 4096), 0);
    ifd_arena_t a;
    ifd_arena_init(&a, 1024);
    json_t *schema = json_pack("{s:s}", "type", "object");
    const int32_t w[3] = {7, -1, 9};
    ifd_gcache_put(c, "k1", 2, w, 3, schema, 1000);
    ck_assert_int_eq(schema->refcount, 2); /* the test's and the cache's */
    int32_t *got;
    size_t n;
    json_t *s = NULL;
    ck_assert_int_eq(ifd_gcache_get(c, "k1", 2, &a, &got, &n, &s), 1);
    ck_assert_uint_eq(n, 3);
    ck_assert_mem_eq(got, w, sizeof w);
    ck_assert_ptr_eq(s, schema);
    ck_assert_int_eq(schema->refcount, 3);
    /* an entry without a schema gives NULL; a miss leaves the output alone */
    ifd_gcache_put(c, "k2", 2, w, 1, NULL, 1000);
    json_t *none = schema;
    ck_assert_int_eq(ifd_gcache_get(c, "k2", 2, &a, &got, &n, &none), 1);
    ck_assert_ptr_null(none);
    ck_assert_int_eq(ifd_gcache_get(c, "k3", 2, &a, &got, &n, NULL), 0);
    size_t entries, bytes;
    uint64_t hits, misses;
    ifd_gcache_stats(c, &entries, &bytes, &hits, &misses);
    ck_assert_uint_eq(entries, 2);
    ck_assert_uint_ge(bytes, 1000); /* the schema counts */
    ck_assert_uint_eq(hits, 2);
    ck_assert_uint_eq(misses, 1);
    /* entries whose schemas fill the cache evict k1 (the least recent): the
     * cache's reference goes, the caller's stays valid */
    json_t *other = json_pack("{s:i}", "minimum", 1);
    ifd_gcache_put(c, "k4", 2, w, 3, other, 3000);
    ifd_gcache_put(c, "k5", 2, w, 3, other, 3000);
    ck_assert_int_eq(ifd_gcache_get(c, "k1", 2, &a, &got, &n, NULL), 0);
    ck_assert_int_eq(schema->refcount, 2); /* the test's two */
    ck_assert_str_eq(json_string_value(json_object_get(s, "type")), "object");
    /* an entry larger than the whole cache is not stored (nor referenced) */
    ifd_gcache_put(c, "k6", 2, w, 3, schema, 5000);
    ck_assert_int_eq(schema->refcount, 2);
    ck_assert_int_eq(other->refcount, 2); /* k5's (k4 was evicted by k5) and the test's */
    ifd_gcache_destroy(c);
    ck_assert_int_eq(other->refcount, 1);
    json_decref(s);
    json_decref(schema);
    json_decref(other);
    ifd_arena_close(&a);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gcache");
    ifd_test_case(s, "gcache", 30, IFD_TESTS(test_words_and_schema));
    return ifd_test_run(s);
}
