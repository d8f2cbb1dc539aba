/*
 * toolcall.h — tool calls recognised in a model's output text.
 *
 * Formats (tried in this order; names must be among the request's tools,
 * otherwise the text stays content):
 *   forced    tool_choice "required": the grammar's JSON array
 *             [{"name", "parameters"}…]; "named": the text is the arguments
 *   hermes    `<tool_call>{"name", "arguments"}</tool_call>` blocks (Hermes,
 *             Qwen 2.5/3, SmolLM3 …); text before the first block is content
 *   mistral   `[TOOL_CALLS]` then a JSON array of {"name", "arguments"}
 *             (also `[TOOL_CALLS]name[ARGS]{…}` of newer Mistral templates)
 *   llama     `<|python_tag|>` optionally, then one JSON object {"name",
 *             "parameters"|"arguments"} or an array of them, as the whole
 *             output (Llama 3.x JSON tool calling)
 * Arguments are returned as compact JSON text of an object. With the
 * request's parallel_tool_calls false only the first call is returned (the
 * rest of the calls is dropped, not turned into content), in every format.
 *
 * ifd_toolcall_prefix tells a streamer whether the text so far could still
 * become a tool call, so it can hold it back instead of streaming it as
 * content.
 *
 * Memory: results come from the caller's arena. Reentrant.
 */
#ifndef IFD_TOOLCALL_H
#define IFD_TOOLCALL_H

#include "arena.h"
#include "openai.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *name;
    char *arguments; /* compact JSON object */
} ifd_toolcall_t;

typedef struct {
    size_t content_len; /* text[0 .. content_len) is content (trailing space trimmed) */
    ifd_toolcall_t *calls;
    size_t n_calls; /* 0: no tool call recognised, all of the text is content */
} ifd_toolcall_result_t;

/* Parses text (len bytes) under the request's tool_choice and tools.
 * 0 (*out filled) or IFD_ENOMEM. */
int ifd_toolcall_parse(ifd_arena_t *a, const char *text, size_t len, const ifd_oai_request_t *req,
                       ifd_toolcall_result_t *out);

/* Auto mode: where a tool call could start in text: the offset of the
 * first "<tool_call>", "[TOOL_CALLS]" or "<|python_tag|>" (or of a proper
 * prefix of one at the end of the text), 0 when the text so far (leading
 * whitespace aside) could be a JSON call, or len when none can follow. */
size_t ifd_toolcall_hold_from(const char *text, size_t len);

#endif
