/*
 * grammar_conv.h — constraint sources compiled to grammar text (the format
 * of grammar.h): JSON Schema, "any JSON object", regular expressions,
 * choice lists and tool calls. The router calls these off its loop, under
 * the request's budget (proto/openai.h: ifd_oai_build_grammar), and
 * compiles the result once; an unsupported feature is a 400 naming it.
 *
 * JSON Schema (docs/structured-outputs.md lists every keyword): draft-04 to
 * 2020-12 and OpenAPI's nullable, converted so that every text the grammar
 * accepts is valid (a subset of the valid values where a grammar cannot
 * have them all: fractional number bounds tightened inward, optional
 * properties outside "properties" never written). Annotations and unknown
 * keywords are ignored; types, enum/const of any JSON, numeric bounds and
 * integer multipleOf (exact digit grammars), string lengths, pattern,
 * formats (every one of 2020-12: schema_format.h), properties / required /
 * additionalProperties /
 * patternProperties / min-maxProperties / dependentRequired /
 * dependentSchemas, items /
 * prefixItems / min-maxItems, $ref into the document (pointers, anchors,
 * embedded resources' $id: schema_ref.c; recursion works), allOf and the
 * siblings of $ref / anyOf / oneOf (merged), anyOf, and oneOf with
 * branches that cannot overlap are enforced. What no grammar enforces
 * (general not, if/then/else, contains, uniqueItems, propertyNames,
 * unevaluated*, remote $ref, overlapping oneOf, …) is
 * IFD_ENOTSUP with a message naming the keyword. Properties are generated
 * in schema order, required ones always, optional ones possibly.
 * Numbers: at most 16 integer and 15 fraction digits; whitespace between
 * tokens: none, one space, or a newline and up to 12 spaces/tabs.
 *
 * Regex subset: literals, escapes (\d \D \w \W \s \S \n \r \t \f \v \xHH
 * \uHHHH and escaped punctuation), classes [...] / [^...] with ranges and
 * the class escapes, `.` (any character but newline), groups (...) (?:...)
 * (?P<n>...) (?<n>...), alternation, quantifiers * + ? {m} {m,} {m,n}
 * (lazy `?` suffix accepted: it does not change what matches), ^ at the
 * start and $ at the end. Refused: backreferences, lookaround, \b \B,
 * possessive quantifiers, inline flags. A regex constraint must match the
 * whole output (vLLM's guided_regex); a JSON Schema `pattern` is a search,
 * so an unanchored side lets any string characters through.
 *
 * All functions append grammar text to `out` and return 0, IFD_ENOTSUP
 * (unsupported feature), IFD_EFORMAT (invalid input), IFD_ETOOBIG (the
 * output limit or the budget), IFD_ECANCELED (the budget's cancel flag) or
 * IFD_ENOMEM, with a message in err (errlen bytes) on failure. Conversion is
 * linear in the input; budget (NULL: the default) bounds its steps, time
 * and cancellation all the same. Reentrant.
 */
#ifndef IFD_GRAMMAR_CONV_H
#define IFD_GRAMMAR_CONV_H

#include "arena.h"
#include "grammar/grammar.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* root ::= a JSON value matching schema (borrowed). */
int ifd_gconv_json_schema(const json_t *schema, ifd_buf_t *out, const ifd_grammar_budget_t *budget,
                          char *err, size_t errlen);

/*
 * As ifd_gconv_json_schema, but what no grammar enforces is
 * over-approximated instead of refused (llguidance's rule): general not,
 * if/then/else, contains, uniqueItems, propertyNames and overlapping oneOf
 * (as anyOf) are left out of the grammar; a string or number schema it
 * cannot enforce whole keeps its format, else its pattern, else its lengths
 * (numbers: their bounds without multipleOf); two allOf values that cannot
 * be intersected keep the first. *approx (not NULL) is set when any of this
 * happened: the grammar then accepts a superset of the valid values and the
 * finished output must be checked against the schema (schema_check.h).
 * Left to the check the same way: unevaluatedProperties /
 * unevaluatedItems, and dependentSchemas
 * that exclude each other (a second pass leaves out those whose names are
 * not required). What neither a grammar nor the check evaluates
 * ($dynamicRef, $recursiveRef, remote $ref, a NUL where a C string is
 * read) is still IFD_ENOTSUP. Rule bodies are hash-consed (each distinct
 * rule written once).
 */
int ifd_gconv_json_schema_loose(const json_t *schema, ifd_buf_t *out,
                                const ifd_grammar_budget_t *budget, bool *approx, char *err,
                                size_t errlen);

/* root ::= any JSON object (response_format json_object). */
int ifd_gconv_json_object(ifd_buf_t *out);

/* root ::= a string matching the whole regex. */
int ifd_gconv_regex(const char *re, size_t len, ifd_buf_t *out, const ifd_grammar_budget_t *budget,
                    char *err, size_t errlen);

/* root ::= exactly one of the n strings. */
int ifd_gconv_choice(const char *const *choices, size_t n, ifd_buf_t *out,
                     const ifd_grammar_budget_t *budget, char *err, size_t errlen);

/* One function a tool call may name: its parameters' JSON Schema (NULL:
 * any object). Borrowed. */
typedef struct {
    const char *name;
    const json_t *parameters;
} ifd_gconv_tool_t;

/*
 * Tool calls as vLLM forces them for tool_choice "required": a JSON array
 * of [min_calls, max_calls] (max 0: unbounded) objects
 * {"name": <one of the tools>, "parameters": <its parameters>}. approx
 * NULL: the parameters converted as ifd_gconv_json_schema does; else as
 * ifd_gconv_json_schema_loose does, *approx set when any of them is
 * over-approximated (the calls' parameters must then be checked).
 */
int ifd_gconv_tool_calls(const ifd_gconv_tool_t *tools, size_t n, unsigned min_calls,
                         unsigned max_calls, ifd_buf_t *out, const ifd_grammar_budget_t *budget,
                         bool *approx, char *err, size_t errlen);

#endif
