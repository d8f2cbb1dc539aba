/*
 * openai.h — the OpenAI-compatible HTTP API as data: request bodies of
 * POST /v1/chat/completions, /v1/completions, /tokenize and /detokenize
 * parsed and validated into plain structs, and the JSON of every response
 * (completions, SSE chunks, usage, logprobs, /v1/models, errors) built from
 * plain structs. Shapes follow what the official openai Python client reads
 * (shared/specs/SERVING-API.md) and vLLM for /tokenize and /detokenize.
 *
 * Parsing: unknown keys are ignored and JSON null means "not given" for
 * every optional field. "\u0000" is accepted in strings, as vLLM accepts
 * it: text the model reads keeps it (message contents, prompts, stop
 * strings, tool descriptions and arguments, template variables: their
 * lengths are given), while a field the server reads as a name, an id or
 * a constraint (model, roles and types, tool names, JSON Schemas, regex,
 * choice and grammar sources) refuses it with a 400 naming the field,
 * never cutting it short. A NUL in an object key is refused by the JSON
 * parser (400). A rejected request fills an ifd_oai_error_t the way
 * OpenAI does: status 400, type "invalid_request_error", `param` the exact
 * path of the offending field ("temperature", "messages[2].content[0].type",
 * "prompt[1]", "stream_options.include_usage"), `code` such as
 * "invalid_type", "decimal_above_max_value", "missing_required_parameter"
 * (or null), and a message in OpenAI's wording. Validation is what can be
 * checked without the model; the router still checks token ids against the
 * vocabulary and the prompt length against the context.
 *
 * Memory: parsed requests live in the caller's per-request arena (every
 * string and array is allocated there and freed with it; nothing else to
 * free). Response builders only read their inputs and append text to an
 * ifd_buf_t; on failure they leave the buffer as it was.
 *
 * Text: token bytes handed to the builders may be any bytes (a token can be
 * half a UTF-8 character); invalid UTF-8 is replaced by U+FFFD in JSON
 * strings, while logprob "bytes" arrays keep the raw bytes. Non-finite
 * logprobs (-inf) are written as -9999.0, as vLLM does.
 *
 * Threading: all functions are reentrant; a stream state belongs to one
 * thread at a time.
 */
#ifndef IFD_OPENAI_H
#define IFD_OPENAI_H

#include "arena.h"
#include "grammar/grammar.h"
#include "wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits enforced by the parser (each with its own 400 error). */
#define IFD_OAI_MAX_STOP                      4    /* stop strings (OpenAI's limit) */
#define IFD_OAI_MAX_STOP_IDS                  1024 /* stop_token_ids (vLLM extension) */
#define IFD_OAI_MAX_N                         128  /* choices per prompt */
#define IFD_OAI_MAX_LOGPROB_TOKEN_IDS         (1 << 18) /* logprob_token_ids (a vocabulary) */
/* top_logprobs, completions logprobs and prompt_logprobs: any int up to
 * INT32_MAX, or -1 (vLLM: the whole vocabulary), parsed as this; the router
 * resolves it to the model's vocabulary and caps all three by its
 * max_logprobs setting (daemon/gen.c). */
#define IFD_OAI_LOGPROBS_VOCAB                UINT32_MAX
#define IFD_OAI_MAX_LOGIT_BIAS                1024 /* logit_bias entries */
#define IFD_OAI_MAX_ALLOWED_IDS               (1 << 18) /* allowed_token_ids (a vocabulary) */
#define IFD_OAI_MAX_PROMPTS                   256  /* prompts in one completions request */
#define IFD_OAI_DEFAULT_COMPLETION_MAX_TOKENS 16   /* OpenAI's default for /v1/completions */

/* Room for an id from ifd_oai_make_id, NUL included. */
#define IFD_OAI_ID_MAX 48

typedef enum {
    IFD_OAI_CHAT = 0,       /* /v1/chat/completions */
    IFD_OAI_COMPLETION = 1, /* /v1/completions */
    IFD_OAI_RESPONSES = 2,  /* /v1/responses: parsed as a chat request (proto/responses.h),
                               answered as a Response object (ifd_oai_meta_t.kind) */
} ifd_oai_kind_t;

/* ---- errors ---------------------------------------------------------------------- */

/* An OpenAI error object plus the HTTP status to send it with. Empty
 * `param` or `code` are written as JSON null. */
typedef struct {
    int status;
    char type[40];
    char code[48];
    char param[128];
    char message[512];
} ifd_oai_error_t;

/* OpenAI's error type for a status: 400/404/405/413/422 "invalid_request_error",
 * 401 "authentication_error", 403 "permission_error", 429 "rate_limit_error",
 * 503 "service_unavailable_error", other >= 500 "server_error". */
const char *ifd_oai_error_type(int status);

/* Fills *e: type from ifd_oai_error_type(status) when type is NULL; code and
 * param may be NULL (null). Messages longer than the buffer are cut. */
void ifd_oai_error_set(ifd_oai_error_t *e, int status, const char *type, const char *code,
                       const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* A list of the bad items of one field, for a 400 that names every one
 * ("'a', 'b' and 3 more"): zero-initialise, add each name; names past the
 * room are only counted. ifd_oai_names_more writes " and N more" (or "")
 * into buf and returns it. Pure. */
typedef struct {
    char text[320];
    size_t n, listed;
} ifd_oai_names_t;
void ifd_oai_names_add(ifd_oai_names_t *l, const char *name);
const char *ifd_oai_names_more(const ifd_oai_names_t *l, char *buf, size_t cap);

/* Appends {"error":{"message","type","param","code"}}. 0 or IFD_ENOMEM. */
int ifd_oai_error_json(ifd_buf_t *out, const ifd_oai_error_t *e);

/* ---- requests ---------------------------------------------------------------------- */

typedef struct {
    const char *role;   /* "system", "developer", "user", "assistant", "tool", "function" (static
                           strings), or any other non-empty role (arena): vLLM passes it to the
                           template */
    char *content;      /* a string, or its text parts joined with "\n"; "" for null */
    size_t content_len; /* its bytes: content may hold NULs ("\u0000"), so use this */
    /* name and tool_call_id: as C strings, up to a NUL they may hold; what
     * the templates render is messages_json, which keeps them whole */
    char *name;         /* NULL when absent */
    char *tool_calls;   /* assistant: its "tool_calls" array as compact JSON; NULL when absent */
    char *tool_call_id; /* tool: the call it answers; NULL when absent */
    /* content with image parts: its parts as the chat template sees them,
     * compact JSON [{"type": "text", "text": …}, {"type": "image"}, …] in
     * the request's order (transformers' and Gemma 3's template shape);
     * NULL for a message without images (content is then all there is) */
    char *parts_json;
} ifd_oai_message_t;

/* Image parts of one request at most (the daemon's own limit,
 * limit_images_per_prompt, is lower: daemon/gen.c). */
#define IFD_OAI_MAX_IMAGES 256

/* One image content part of a chat message (chat {"type": "image_url",
 * "image_url": {"url": …}}, Responses input_image), in prompt order. The
 * URL is kept as sent (data: or not: the daemon decides); all arena. */
typedef struct {
    uint32_t message, part; /* messages[message].content[part] */
    char *url;              /* NUL-terminated; url_len bytes */
    size_t url_len;
    /* the part as errors name it: "messages[i].content[k]", or for
     * /v1/responses "input[i].content[k]" */
    const char *param;
} ifd_oai_image_t;

/* One function of "tools" (type "function"). */
typedef struct {
    char *name;        /* [A-Za-z0-9_-]{1,64}, OpenAI's rule */
    char *description; /* NULL when absent; up to a NUL it may hold (tools_json keeps it whole) */
    char *parameters;  /* JSON Schema as compact JSON; NULL when absent (any object) */
    bool strict;       /* "strict": true — its schema is checked even when no call is forced */
} ifd_oai_tool_t;

/* Where a request's structured output comes from (ifd_oai_request_t.so_kind). */
typedef enum {
    IFD_OAI_SO_NONE = 0,
    IFD_OAI_SO_JSON,        /* a JSON Schema */
    IFD_OAI_SO_JSON_OBJECT, /* any JSON object */
    IFD_OAI_SO_REGEX,
    IFD_OAI_SO_CHOICE, /* a JSON array of strings */
    IFD_OAI_SO_GRAMMAR,
    IFD_OAI_SO_TOOLS, /* tool_choice required / named: the calls' grammar */
} ifd_oai_so_kind_t;

typedef enum {
    IFD_OAI_TOOL_CHOICE_NONE = 0, /* no tools, or "none": never call */
    IFD_OAI_TOOL_CHOICE_AUTO,     /* the model decides; calls parsed from its output */
    IFD_OAI_TOOL_CHOICE_REQUIRED, /* at least one call, forced by the grammar */
    IFD_OAI_TOOL_CHOICE_NAMED,    /* exactly this function (tool_index), forced */
} ifd_oai_tool_choice_t;

/* One completions prompt: text or token ids (exactly one is non-NULL). */
typedef struct {
    char *text;
    size_t text_len;
    int32_t *tokens; /* each in [0, INT32_MAX]; n_tokens >= 1 */
    size_t n_tokens;
} ifd_oai_prompt_t;

typedef struct {
    int32_t id; /* >= 0; the router checks it against the vocabulary */
    float bias; /* in [-100, 100] */
} ifd_oai_logit_bias_t;

typedef struct {
    ifd_oai_kind_t kind;
    char *model; /* NULL when absent (the router picks its one model) */

    /* chat: n_messages >= 1 */
    ifd_oai_message_t *messages;
    size_t n_messages;
    bool add_generation_prompt;  /* vLLM extension; default true */
    /* vLLM extension, default false: the prompt ends inside the last message
     * (an assistant message; add_generation_prompt must be false) */
    bool continue_final_message;
    /* vLLM's chat_template_kwargs (extra Jinja variables) as a compact JSON
     * object; NULL when absent or empty. Keys the server sets (messages,
     * tools, documents, add_generation_prompt, bos_token, eos_token) are
     * refused. */
    char *template_kwargs;
    /* vLLM's documents (RAG): an array of objects as compact JSON, the
     * template's `documents` variable; NULL when absent or empty. */
    char *documents;

    /* completions: n_prompts in [1, IFD_OAI_MAX_PROMPTS]; choice index of
     * prompt p, sample i is p * n + i (OpenAI's order) */
    ifd_oai_prompt_t *prompts;
    size_t n_prompts;
    /* completions: the prompt text is prepended to each choice; chat (vLLM):
     * the last message's content when it is an assistant message */
    bool echo;

    /* max_completion_tokens, else max_tokens; >= 1. -1 when neither came
     * (chat: up to the context); completions default to 16. Completions
     * with echo may send 0 (vLLM): the answer is the prompt alone (one
     * token is generated and dropped, and counted in usage as vLLM does). */
    int64_t max_tokens;
    float temperature;        /* [0, 2], default 1 */
    float top_p;              /* [0, 1], default 1 */
    int32_t top_k;            /* 0 off (-1 accepted as off), default 0 */
    float min_p;              /* [0, 1], default 0 */
    float frequency_penalty;  /* [-2, 2], default 0 */
    float presence_penalty;   /* [-2, 2], default 0 */
    float repetition_penalty; /* > 0, default 1 */
    uint32_t sampling_given;  /* IFD_OAI_GIVEN_* bits: the fields above the request set */
    bool has_seed;
    uint64_t seed; /* the JSON integer's two's-complement bits */

    char **stop; /* n_stop <= IFD_OAI_MAX_STOP non-empty strings (empty ones dropped) */
    size_t *stop_len; /* their bytes: a stop string may hold NULs */
    size_t n_stop;
    int32_t *stop_token_ids; /* vLLM extension */
    size_t n_stop_token_ids;
    ifd_oai_logit_bias_t *logit_bias; /* in the order of the JSON object */
    size_t n_logit_bias;

    uint32_t n; /* [1, IFD_OAI_MAX_N], default 1 */

    /* chat: logprobs (bool) and top_logprobs; completions: logprobs given
     * (an int) sets logprobs = true and top_logprobs = its value. */
    bool logprobs;
    uint32_t top_logprobs; /* [0, INT32_MAX] or IFD_OAI_LOGPROBS_VOCAB */
    /* vLLM's prompt_logprobs (an int 0..INT32_MAX, or -1 parsed as
     * IFD_OAI_LOGPROBS_VOCAB; the router caps it by max_logprobs): each
     * prompt token's logprob, rank and this many top alternatives — chat:
     * the response's top-level "prompt_logprobs"; completions: each
     * choice's. With stream only 0 is accepted (as vLLM), and nothing is
     * computed or sent. Completions echo + logprobs needs the same scores
     * (the router asks for max(top_logprobs, prompt_top_logprobs)). */
    bool prompt_logprobs;
    uint32_t prompt_top_logprobs;

    bool stream;
    bool include_usage;    /* stream_options.include_usage */
    bool ignore_eos;       /* vLLM extension, default false */
    bool use_cache;        /* inferd extension: consult the prefix cache; default true */
    int32_t priority;      /* vLLM extension: lower is served first; default 0 */
    bool include_stop_str; /* vLLM include_stop_str_in_output: keep the matched stop string */
    int64_t truncate_prompt_tokens; /* vLLM: keep only the last k prompt tokens; 0 off, -1 the
                                       context length */

    /* Structured output as the request gives it: from response_format
     * json_object / json_schema, vLLM's structured_outputs {json, regex,
     * choice, grammar, json_object} or the older guided_json / guided_regex
     * / guided_choice / guided_grammar (at most one source per request), or
     * forced by tool_choice required / named (IFD_OAI_SO_TOOLS). Parsing
     * checks only its shape (cheap, on the router's loop); so_source is the
     * schema's or the choice list's compact JSON, or the regex / grammar
     * text, and so_param the field it came from. */
    ifd_oai_so_kind_t so_kind;
    const char *so_param;
    char *so_source;
    size_t so_source_len;
    /* The grammar text (common/grammar/grammar.h) the output must follow,
     * made by ifd_oai_build_grammar; NULL: unconstrained (or not built). */
    char *grammar;
    size_t grammar_len;
    /* The grammar of a JSON Schema (so_kind IFD_OAI_SO_JSON) over-approximates
     * it (grammar_conv.h: ifd_gconv_json_schema_loose): a finished output
     * must be checked against so_source (schema_check.h). Set with grammar. */
    bool so_check;

    /* chat: tools and how they may be called. tools_json (compact JSON of
     * the "tools" array) and messages_json (of "messages") keep the
     * request's own shapes for a template that renders them. */
    ifd_oai_tool_t *tools;
    size_t n_tools;
    char *tools_json;    /* NULL when there are no tools */
    char *messages_json; /* chat: always set */
    ifd_oai_tool_choice_t tool_choice;
    uint32_t tool_index;      /* NAMED: which tool */
    bool parallel_tool_calls; /* default true; false: one call (REQUIRED's grammar, auto's parse) */

    /* vLLM's min_tokens: end-of-sequence and stop tokens are suppressed, and
     * stop strings not matched, until this many tokens were generated. 0 off. */
    uint32_t min_tokens;
    /* inferd's per-request speculative decoding (docs/speculative.md), in
     * the wire's form: "speculative": false (method 1, off), true (2,
     * n-gram), or an object with vLLM's speculative_config names — method
     * ("ngram", "draft_model" (or "draft": 3, the daemon's draft model) or
     * "off"; default ngram), num_speculative_tokens (1..16),
     * prompt_lookup_min / prompt_lookup_max (1..16). Absent: all 0, the
     * daemon's setting. */
    ifd_wire_spec_t spec;
    /* vLLM's stream_options.continuous_usage_stats (with include_usage):
     * every chunk carries the usage so far. */
    bool continuous_usage;

    /* vLLM's return_token_ids: prompt_token_ids and each choice's
     * token_ids in the answer (ifd_oai_choice_t), streamed too. */
    bool return_token_ids;
    /* vLLM's return_tokens_as_token_ids: the tokens of logprobs (and their
     * alternatives) written "token_id:<id>", their bytes those of that
     * text, as vLLM writes them. */
    bool tokens_as_ids;
    /* vLLM's allowed_token_ids: every draw among these ids only (the
     * worker masks the others out before sampling); NULL: no such
     * restriction. Non-empty when given (vLLM refuses []); the router checks
     * the ids against the vocabulary. */
    int32_t *allowed_token_ids;
    size_t n_allowed_token_ids;
    /* vLLM's logprob_token_ids: with logprobs (required), each token's
     * top_logprobs are the sampled token's then these ids' (in this order),
     * instead of the top k. 1..IFD_OAI_MAX_LOGPROB_TOKEN_IDS ids (the
     * daemon holds them to its max_logprobs, as top_logprobs); NULL: off. */
    int32_t *logprob_token_ids;
    size_t n_logprob_token_ids;

    /* /v1/responses only (proto/responses.h): the request fields a Response
     * object repeats (instructions, tools, text, temperature, …) as one
     * compact JSON object; NULL for the other endpoints. */
    char *responses_echo;

    /* chat: the image parts of the messages in prompt order (none: NULL, 0),
     * and vLLM's mm_processor_kwargs.do_pan_and_scan (-1: not given, the
     * model's preprocessor decides; 0 or 1) */
    ifd_oai_image_t *images;
    size_t n_images;
    int do_pan_and_scan;
} ifd_oai_request_t;

/* ifd_oai_request_t.sampling_given bits. */
#define IFD_OAI_GIVEN_TEMPERATURE        (1u << 0)
#define IFD_OAI_GIVEN_TOP_P              (1u << 1)
#define IFD_OAI_GIVEN_TOP_K              (1u << 2)
#define IFD_OAI_GIVEN_MIN_P              (1u << 3)
#define IFD_OAI_GIVEN_REPETITION_PENALTY (1u << 4)

/* The model's own sampling defaults (generation_config.json), for the
 * fields a request leaves out. A negative value: the model sets none. */
typedef struct {
    float temperature, top_p, min_p, repetition_penalty;
    int32_t top_k;
} ifd_oai_sampling_defaults_t;

/* Sets each sampling field `r` did not give (sampling_given) from `d`, when
 * `d` has it and it is in the range a request may send (temperature [0, 2],
 * top_p (0, 1], top_k >= 0, min_p [0, 1], repetition_penalty > 0); a value
 * out of range is skipped, never clamped. vLLM's --generation-config auto.
 * Returns the IFD_OAI_GIVEN_* bits it set. Pure. */
uint32_t ifd_oai_apply_sampling_defaults(ifd_oai_request_t *r,
                                         const ifd_oai_sampling_defaults_t *d);

/* Whether tool i's parameters are enforced: tool_choice required (every
 * tool), named (that one), or "strict": true under tool_choice auto (with
 * "none" no tool is called, with a named one only that one; a strict tool
 * is then only shown, as vLLM does) — converted before the request
 * runs (ifd_oai_build_grammar) and each call's arguments checked against
 * them after generation (daemon/gen.c). A tool without parameters is not.
 * Pure. */
bool ifd_oai_tool_enforced(const ifd_oai_request_t *r, size_t i);

/*
 * The structured-output work of a parsed request, which parsing leaves
 * undone because it grows with the input (schemas, regexes, grammars): the
 * parameters of every tool a grammar may enforce converted (tool_choice
 * required: all; named: that one; and every "strict": true tool) — a tool
 * that is only shown to the model (auto) never fails the request over a
 * keyword a grammar cannot enforce —, the request's constraint converted to
 * grammar text (r->grammar, from a) and compiled, all under `budget` (NULL:
 * the default), for a caller off the router's loop. *compiled (may be NULL)
 * gets the compiled grammar when there is one (caller frees with
 * ifd_grammar_destroy), else NULL. Returns 0; IFD_EINVAL with *err a 400
 * naming the field (unsupported keyword, invalid regex or grammar, a budget
 * exceeded, too ambiguous); IFD_ECANCELED (budget's cancel flag); IFD_ENOMEM
 * (*err: 500). Reentrant: touches only r and a.
 */
int ifd_oai_build_grammar(ifd_arena_t *a, ifd_oai_request_t *r, const ifd_grammar_budget_t *budget,
                          ifd_grammar_t **compiled, ifd_oai_error_t *err);

/*
 * Parses the body of a POST /v1/chat/completions (or /v1/completions)
 * request into *out, allocating from `a`. Returns 0; IFD_EINVAL with *err
 * filled (status 400) for invalid JSON or fields; IFD_ENOMEM (*err: 500).
 * `body` need not be NUL-terminated. Requests the server cannot honour
 * (image parts, suffix, best_of > n, prompt_logprobs with stream, …:
 * docs/api.md lists them) are refused with 400 and the field named, rather
 * than silently ignored; schemas, regexes and grammars are checked later by
 * ifd_oai_build_grammar.
 */
int ifd_oai_parse_chat(ifd_arena_t *a, const char *body, size_t len, ifd_oai_request_t *out,
                       ifd_oai_error_t *err);
int ifd_oai_parse_completion(ifd_arena_t *a, const char *body, size_t len, ifd_oai_request_t *out,
                             ifd_oai_error_t *err);

/* POST /tokenize (vLLM): {"prompt": str} or {"messages": […]}, plus
 * add_special_tokens (default true), add_generation_prompt (default true),
 * return_token_strs (default false). Exactly one of prompt/messages. */
typedef struct {
    char *model;
    char *prompt; /* NULL when messages were given */
    size_t prompt_len;
    ifd_oai_message_t *messages;
    size_t n_messages;
    bool add_special_tokens;
    bool add_generation_prompt;
    bool return_token_strs;
} ifd_oai_tokenize_t;

/* POST /detokenize (vLLM): {"tokens": [int, …]}. */
typedef struct {
    char *model;
    int32_t *tokens; /* may be empty */
    size_t n_tokens;
} ifd_oai_detokenize_t;

/* Same contract as ifd_oai_parse_chat. */
int ifd_oai_parse_tokenize(ifd_arena_t *a, const char *body, size_t len, ifd_oai_tokenize_t *out,
                           ifd_oai_error_t *err);
int ifd_oai_parse_detokenize(ifd_arena_t *a, const char *body, size_t len,
                             ifd_oai_detokenize_t *out, ifd_oai_error_t *err);

/* ---- responses ------------------------------------------------------------------------ */

/* Identity shared by every object of one response. Strings are borrowed. */
typedef struct {
    ifd_oai_kind_t kind;
    const char *id; /* from ifd_oai_make_id; the same in every chunk */
    const char *model;
    int64_t created;                /* unix seconds; the same in every chunk */
    const char *system_fingerprint; /* NULL: omitted */
    const char *responses_echo;     /* IFD_OAI_RESPONSES: ifd_oai_request_t.responses_echo */
} ifd_oai_meta_t;

typedef struct {
    uint32_t prompt_tokens;
    uint32_t completion_tokens;
    uint32_t cached_tokens; /* prompt_tokens_details.cached_tokens */
} ifd_oai_usage_t;

/* Raw bytes (e.g. a token's text, possibly not valid UTF-8). */
typedef struct {
    const char *p;
    size_t len;
} ifd_oai_bytes_t;

/* One alternative of a token's top logprobs. */
typedef struct {
    const char *bytes; /* the token's raw bytes */
    size_t len;
    float logprob;
} ifd_oai_top_logprob_t;

/* One generated token with its logprob and alternatives (most probable
 * first). Completions echo: the prompt's tokens come first, the first of
 * them with no_logprob (null logprob and top_logprobs, as OpenAI). */
typedef struct {
    const char *bytes;
    size_t len;
    float logprob;
    const ifd_oai_top_logprob_t *top;
    size_t n_top;
    bool no_logprob;
} ifd_oai_logprob_t;

/* A token of vLLM's prompt_logprobs: id, text ("decoded_token"), logprob
 * and rank (1 = most probable). */
typedef struct {
    int32_t id;
    const char *bytes;
    size_t len;
    float logprob;
    uint32_t rank;
} ifd_oai_plp_token_t;

/* One prompt position (1 .. n_prompt - 1): its token and the alternatives
 * (most probable first; written with ranks 1, 2, …). */
typedef struct {
    ifd_oai_plp_token_t tok;
    const ifd_oai_plp_token_t *top;
    size_t n_top;
} ifd_oai_prompt_logprob_t;

/* Completions echo + logprobs: the prompt's part of every choice's logprobs
 * (the prompt's tokens, the first with no_logprob), written once by
 * ifd_oai_lp_prefix_build and shared by the n choices of that prompt. Each
 * buffer holds one column's items, comma-separated (tokens, token_logprobs,
 * top_logprobs, text_offset counted from 0); `chars` is where the choice's
 * own offsets go on. Owned by the caller: ifd_oai_lp_prefix_free. */
typedef struct {
    ifd_buf_t tokens, token_logprobs, top_logprobs, text_offset;
    size_t n;
    uint64_t chars;
} ifd_oai_lp_prefix_t;

/* A tool call of a chat response. arguments is JSON text (an object). */
typedef struct {
    const char *id; /* "call_…" */
    const char *name;
    const char *arguments;
} ifd_oai_tool_call_t;

/* A choice of a non-streamed response, or the part of one a chunk carries. */
typedef struct {
    uint32_t index;
    const char *text; /* may be NULL when text_len is 0 */
    size_t text_len;
    const char *finish_reason; /* "stop", "length", …; NULL: null */
    /* logprobs: when has_logprobs, a logprobs object over these n_logprobs
     * tokens (possibly none); otherwise "logprobs": null. */
    bool has_logprobs;
    const ifd_oai_logprob_t *logprobs;
    size_t n_logprobs;
    uint32_t text_offset; /* completions: offset of this text in the whole output */
    /* chat: the message's tool calls (content is null when text_len is 0) */
    const ifd_oai_tool_call_t *tool_calls;
    size_t n_tool_calls;
    /* vLLM's prompt_logprobs (non-streamed responses): when
     * has_prompt_logprobs, [null, {"<id>": {logprob, rank, decoded_token}},
     * …] over positions 1 .. n_prompt_logprobs, each with the token itself
     * first and at most prompt_top alternatives; completions put it in the
     * choice, chat at the top level (from choices[0]). Otherwise the key is
     * there with null, as vLLM writes it (clients read the attribute). */
    bool has_prompt_logprobs;
    const ifd_oai_prompt_logprob_t *prompt_logprobs;
    size_t n_prompt_logprobs;
    uint32_t prompt_top;
    /* The same array already written (ifd_oai_prompt_logprobs_json), used
     * as it is instead of prompt_logprobs: n choices of one prompt share
     * one rendering. NULL: written from prompt_logprobs. Borrowed. */
    const char *prompt_logprobs_json;
    size_t prompt_logprobs_json_len;
    /* Completions (echo + logprobs): when not NULL, the logprobs object
     * starts with these prompt tokens, then `logprobs` (whose offsets go on
     * from prefix->chars); text_offset must then be 0. Borrowed. */
    const ifd_oai_lp_prefix_t *logprobs_prefix;
    /* vLLM's return_token_ids: when has_token_ids, "token_ids": the choice's
     * generated ids (a chunk: the ids since the last chunk); every id the
     * worker sampled, an ending EOS or stop id included (usage counts
     * them). prompt_token_ids (NULL: omitted) are the prompt's ids:
     * completions put them in the choice (a stream: its first chunk), chat
     * at the top level (from choices[0]; a stream: the first chunk). */
    bool has_token_ids;
    const int32_t *token_ids;
    size_t n_token_ids;
    const int32_t *prompt_token_ids;
    size_t n_prompt_token_ids;
} ifd_oai_choice_t;

/* Writes "chatcmpl-<32 hex>" (chat), "cmpl-<32 hex>" or "resp_<32 hex>"
 * (responses) from 128 random bits the caller supplies; out holds
 * IFD_OAI_ID_MAX bytes. */
void ifd_oai_make_id(char *out, ifd_oai_kind_t kind, uint64_t r0, uint64_t r1);

/* Appends the usage object:
 * {"prompt_tokens","completion_tokens","total_tokens","prompt_tokens_details":{"cached_tokens"}}.
 */
int ifd_oai_usage_json(ifd_buf_t *out, const ifd_oai_usage_t *u);

/* Appends a logprobs object over n tokens: chat
 * {"content":[{token,logprob,bytes,top_logprobs:[{token,logprob,bytes}]}]},
 * completions {tokens,token_logprobs,top_logprobs:[{token:logprob}],
 * text_offset} with offsets counted in characters from text_offset.
 * 0 or IFD_ENOMEM. */
int ifd_oai_logprobs_json(ifd_buf_t *out, ifd_oai_kind_t kind, const ifd_oai_logprob_t *lp,
                          size_t n, uint32_t text_offset);

/* Appends vLLM's prompt_logprobs array for positions 1 .. n of a prompt
 * (see ifd_oai_choice_t), each with at most `top` alternatives: the text
 * ifd_oai_choice_t.prompt_logprobs_json takes. 0 or IFD_ENOMEM (out then
 * unchanged). Pure; any thread. */
int ifd_oai_prompt_logprobs_json(ifd_buf_t *out, const ifd_oai_prompt_logprob_t *v, size_t n,
                                 uint32_t top);

/* Writes the prompt's n tokens into *p (initialised here) as the columns
 * of a completions logprobs object. 0 or IFD_ENOMEM (*p then empty). Free
 * with ifd_oai_lp_prefix_free (also after a failure). Pure; any thread. */
int ifd_oai_lp_prefix_build(ifd_oai_lp_prefix_t *p, const ifd_oai_logprob_t *lp, size_t n);
void ifd_oai_lp_prefix_free(ifd_oai_lp_prefix_t *p);

/*
 * Appends a whole non-streamed response: chat.completion (choices with
 * message {role:"assistant", content}) or text_completion (choices with
 * text), with usage; for IFD_OAI_RESPONSES a Response object built from
 * choices[0] (n_choices must be 1: proto/responses.h). The text is written
 * as it goes, no tree: memory is about the response's own size, and time
 * linear in it. 0, IFD_EINVAL (NULL meta strings, a logprobs_prefix with a
 * text_offset), IFD_ENOMEM; on failure out is unchanged. Pure; any thread
 * (the daemon builds large ones on its thread pool).
 */
int ifd_oai_response_json(ifd_buf_t *out, const ifd_oai_meta_t *m, const ifd_oai_choice_t *choices,
                          size_t n_choices, const ifd_oai_usage_t *usage);
/* The same, stopping with IFD_ETOOBIG (out unchanged) once the response
 * would be longer than max_bytes (0: no limit; the daemon's
 * max_response_bytes): the memory it takes is bounded too. */
int ifd_oai_response_json_max(ifd_buf_t *out, const ifd_oai_meta_t *m,
                              const ifd_oai_choice_t *choices, size_t n_choices,
                              const ifd_oai_usage_t *usage, size_t max_bytes);

/*
 * Size bounds of a non-streamed response (max_response_bytes), lower
 * bounds: what the answer must hold, each part at the fewest bytes it can
 * be written in, so a request refused by them could never have fit.
 *
 * ifd_oai_response_min_bytes: from the request alone, once its prompts are
 * tokenized (prompt_tokens[p] tokens in prompt p; 1 prompt for chat): the
 * prompt logprobs (every choice's in completions, once in chat: vLLM's
 * shapes; each row the token and its `top` alternatives, distinct tokens as
 * a worker sends them), the echoed prompt tokens' logprobs (completions
 * echo + logprobs), and min(min_tokens, max_tokens) tokens per choice with
 * their logprobs. Saturates at UINT64_MAX. Pure.
 *
 * ifd_oai_token_min_bytes: what one generated token adds at least to its
 * choice's logprobs (lp: the entry with its alternatives; 0 without
 * logprobs). Pure.
 */
uint64_t ifd_oai_response_min_bytes(ifd_oai_kind_t kind, const ifd_oai_request_t *r,
                                    const size_t *prompt_tokens, size_t n_prompts);
uint64_t ifd_oai_token_min_bytes(ifd_oai_kind_t kind, const ifd_oai_logprob_t *lp);

/*
 * Streaming. One state per response keeps the OpenAI invariants: the same
 * id/created in every chunk; in chat, role "assistant" in the first delta
 * of each choice; finish_reason only on a choice's last chunk (nothing for
 * that choice may follow); with include_usage, "usage": null on every
 * chunk and one usage chunk with "choices": [] before "data: [DONE]".
 * Every function appends whole SSE events to `out`.
 */
typedef struct ifd__resp_stream ifd__resp_stream_t; /* proto/responses.c */

typedef struct {
    ifd_oai_meta_t meta; /* its strings are borrowed for the stream's life */
    bool include_usage;
    /* continuous_usage_stats: when non-NULL (and include_usage), every chunk
     * carries *live_usage, which the caller keeps current; else "usage": null */
    const ifd_oai_usage_t *live_usage;
    ifd__resp_stream_t *resp; /* IFD_OAI_RESPONSES: the typed-event state (arena) */
    uint32_t n_choices;
    uint8_t *state;        /* per choice: 0 nothing sent, 1 started, 2 finished */
    uint32_t *text_offset; /* per choice: characters sent so far (completions logprobs) */
    bool ended;
    /* chat with return_token_ids: the prompt's ids, which ifd_oai_stream_start
     * puts in the first role chunk (vLLM's first chunk); NULL: none. Borrowed. */
    const int32_t *prompt_token_ids;
    size_t n_prompt_token_ids;
} ifd_oai_stream_t;

/* Sets up a stream of n_choices (>= 1) choices; per-choice state comes
 * from `a`. 0, IFD_EINVAL, IFD_ENOMEM. */
int ifd_oai_stream_init(ifd_oai_stream_t *s, ifd_arena_t *a, const ifd_oai_meta_t *m,
                        uint32_t n_choices, bool include_usage);

/* Chat: sends the role chunk ({"role":"assistant","content":""}) of every
 * choice not started yet, so clients see a first chunk before any token
 * (the first one with s->prompt_token_ids when set).
 * Responses: response.created and response.in_progress (sent before the
 * first delta anyway). Completions: nothing. Optional. */
int ifd_oai_stream_start(ifd_oai_stream_t *s, ifd_buf_t *out);

/*
 * A content chunk for choice c->index: c->text (may be empty) and, when
 * c->has_logprobs, their logprobs; c->finish_reason must be NULL. A chunk
 * with no text, no logprobs and nothing else to say is skipped. Returns 0,
 * IFD_EINVAL (bad index, finished choice, a finish_reason, ended stream),
 * IFD_ENOMEM.
 */
int ifd_oai_stream_delta(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_choice_t *c);

/* Chat: the tool calls of choice c->index as deltas the way vLLM streams
 * them: per call one chunk with {index, id, type, function {name,
 * arguments: ""}} then one with the arguments. c->finish_reason must be
 * NULL; text and logprobs are ignored. Same errors as ifd_oai_stream_delta. */
int ifd_oai_stream_tool_calls(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_choice_t *c);

/* The last chunk of choice c->index: any remaining text/logprobs and
 * c->finish_reason (required). Same errors as ifd_oai_stream_delta. */
int ifd_oai_stream_finish(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_choice_t *c);

/* Ends the stream: the usage chunk when include_usage (usage required
 * then), then "data: [DONE]". IFD_EINVAL if a choice is unfinished. */
int ifd_oai_stream_end(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_usage_t *usage);

/* An error inside a stream (the status is already 200): "data: {"error":…}".
 * The caller should then end the stream with ifd_sse_done. */
int ifd_oai_stream_error(ifd_buf_t *out, const ifd_oai_error_t *e);

/* The end of a stream that failed, in the stream's own dialect: chat and
 * completions ifd_oai_stream_error then [DONE]; responses an "error" event
 * (which the openai SDK raises as APIError) then response.failed. */
int ifd_oai_stream_fail(ifd_oai_stream_t *s, ifd_buf_t *out, const ifd_oai_error_t *e);

/* ---- other endpoints -------------------------------------------------------------------- */

typedef struct {
    const char *id;
    int64_t created;
    const char *owned_by;  /* NULL: "inferd" */
    const char *root;      /* vLLM extension (the model path); NULL: id */
    int64_t max_model_len; /* vLLM extension; <= 0: omitted */
    const char *architecture; /* inferd extension ("llama", "gemma3", …); NULL: omitted */
    const char *format;       /* inferd extension: "gguf" or "hf"; NULL: omitted */
} ifd_oai_model_t;

/* GET /v1/models: {"object":"list","data":[{id,object:"model",created,
 * owned_by,root,parent:null,max_model_len,architecture,format}]}. */
int ifd_oai_models_json(ifd_buf_t *out, const ifd_oai_model_t *models, size_t n);

/* GET /v1/models/{id}: the one model object of the list above. */
int ifd_oai_model_json(ifd_buf_t *out, const ifd_oai_model_t *m);

/* POST /tokenize response: {"count","max_model_len","tokens":[…],
 * "token_strs": null | [str…]}. token_strs (n entries) may be NULL. */
int ifd_oai_tokenize_json(ifd_buf_t *out, const int32_t *tokens, size_t n, int64_t max_model_len,
                          const ifd_oai_bytes_t *token_strs);

/* POST /detokenize response: {"prompt": text}. */
int ifd_oai_detokenize_json(ifd_buf_t *out, const char *text, size_t len);

#endif
