/*
 * jsonpath.h — reading a test's JSON answer by dotted path
 * ("choices.0.delta.role"; a numeric part indexes an array). Header-only,
 * for tests: the accessors fail the running check test when the value is
 * missing or of another type; jp and jnull do not.
 */
#ifndef IFD_TEST_JSONPATH_H
#define IFD_TEST_JSONPATH_H

#include <check.h>
#include <jansson.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value at path; NULL if absent. Borrowed from root. */
static inline json_t *jp(json_t *j, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    char *save = NULL;
    for (char *part = strtok_r(buf, ".", &save); part && j; part = strtok_r(NULL, ".", &save)) {
        char *end;
        long idx = strtol(part, &end, 10);
        if (*end == '\0' && json_is_array(j))
            j = json_array_get(j, (size_t)idx);
        else
            j = json_object_get(j, part);
    }
    return j;
}

static inline const char *js(json_t *root, const char *path)
{
    json_t *v = jp(root, path);
    ck_assert_msg(v && json_is_string(v), "%s is not a string", path);
    return json_string_value(v);
}

static inline long long ji(json_t *root, const char *path)
{
    json_t *v = jp(root, path);
    ck_assert_msg(v && json_is_integer(v), "%s is not an integer", path);
    return json_integer_value(v);
}

static inline double jnum(json_t *root, const char *path)
{
    json_t *v = jp(root, path);
    ck_assert_msg(v && json_is_number(v), "%s is not a number", path);
    return json_number_value(v);
}

static inline bool jnull(json_t *root, const char *path)
{
    json_t *v = jp(root, path);
    return v && json_is_null(v);
}

/* The JSON text s[0..n) parsed (the caller decrefs); fails the test if bad. */
static inline json_t *load(const char *s, size_t n)
{
    json_error_t e;
    json_t *j = json_loadb(s, n, 0, &e);
    ck_assert_msg(j != NULL, "bad JSON (%s): %.*s", e.text, (int)n, s);
    return j;
}

#endif
