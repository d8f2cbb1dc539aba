/*
 * schema_check.h — a JSON Schema validator (draft-04 to 2020-12 and
 * OpenAPI's nullable, the dialect grammar_conv.h converts), run on a
 * finished structured output. The converter over-approximates what no
 * grammar enforces (not, if/then/else, contains, uniqueItems,
 * propertyNames, overlapping oneOf, a pattern with lengths it cannot
 * combine): the grammar accepts a superset of the valid texts and this
 * check decides (llguidance's rule; docs/structured-outputs.md).
 *
 * Every constraining keyword is evaluated, with these choices: `format` is
 * asserted for the formats the grammar enforces (schema_format.h: date,
 * time, date-time, duration, uuid, email, hostname, ipv4, ipv6, uri,
 * uri-reference, by their standards' definitions; 2020-12's
 * format-assertion vocabulary, as the grammar enforces them), any other
 * format is an annotation; `pattern` is a PCRE2 search (UTF mode, ECMA-262's
 * syntax as far as PCRE2 shares it); a `$ref` beside other keywords is
 * applied together with them, in every draft (as the converter merges
 * them); a pattern search past a million backtracking steps is
 * IFD_ENOTSUP (not checkable: PCRE2's limit stops it); non-integer
 * `multipleOf` holds within a relative 1e-9 (the
 * quotient of two doubles); `nullable: true` admits null before anything
 * else; `$ref` is read as the converter reads it (schema_ref.c: pointers,
 * anchors, embedded resources' `$id`, a fragment inside an embedded
 * resource read there first); `unevaluatedProperties` / `unevaluatedItems`
 * from the annotations of the keywords and in-place subschemas that pass.
 * Remote references and `$dynamicRef` / `$recursiveRef` cannot be checked
 * here: IFD_ENOTSUP (the converter refuses them too).
 */
#ifndef IFD_SCHEMA_CHECK_H
#define IFD_SCHEMA_CHECK_H

#include <jansson.h>
#include <stddef.h>

/*
 * Checks the value v against schema (both borrowed; schema is also the
 * document its local $refs resolve in). Returns 0 when v is valid;
 * IFD_EINVAL when it is not, with "<JSON pointer into v>: <why>" in err
 * (errlen bytes, may be 0); IFD_ENOTSUP when the schema uses something the
 * checker cannot evaluate, or is not a schema (err names it); IFD_ETOOBIG
 * past the work limit (a million keyword evaluations) or 256 levels of
 * nesting. Reentrant; allocates only for patterns (PCRE2) and messages.
 */
int ifd_schema_check(const json_t *schema, const json_t *v, char *err, size_t errlen);

/*
 * ifd_schema_check on the JSON text text[0..n) (a finished output): its
 * parse failing is IFD_EINVAL ("(the value): not JSON …"), except where
 * the text is JSON that jansson cannot hold — a number beyond a double's
 * range (1e400, which a grammar's exponent allows) or an integer beyond
 * int64 —: IFD_ENOTSUP (not checkable). Reentrant.
 */
int ifd_schema_check_text(const json_t *schema, const char *text, size_t n, char *err,
                          size_t errlen);

/*
 * Whether ifd_schema_check can evaluate every part of schema, whatever the
 * value: 0, or IFD_ENOTSUP naming the first part it cannot (a $ref that is
 * not a reference into schema, $dynamicRef, $recursiveRef, a pattern or
 * patternProperties key PCRE2 does not
 * compile) in err. Values of enum, const, default and examples are not
 * schemas and are skipped. Linear in the schema's size. Reentrant.
 */
int ifd_schema_check_supported(const json_t *schema, char *err, size_t errlen);

#endif
