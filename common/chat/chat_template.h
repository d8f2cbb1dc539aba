/*
 * chat_template.h — turning a list of chat messages into a model prompt.
 *
 * Which template renders, in order:
 *   1. params->name naming a built-in family (--chat-template chatml);
 *   2. params->name naming a Jinja file (--chat-template FILE): its text is
 *      the template (a file that does not parse is an error);
 *   3. params->jinja, else the tokenizer's chat_template (GGUF
 *      tokenizer.chat_template, or tokenizer_config.json's chat_template
 *      for a Hugging Face directory): rendered by common/chat/jinja, exactly as
 *      transformers' apply_chat_template renders it (docs/chat-templates.md);
 *   4. a built-in family as fallback: detected from that template's text
 *      when it does not parse or a trial rendering of a one-message chat
 *      reaches a construct inferd lacks (logged as a warning), or from the
 *      vocabulary when there is none (<start_of_turn> → gemma, …).
 * Built-in families (byte-identical to their official templates on plain
 * conversations, golden-tested): chatml (SmolLM2, Qwen), llama3, gemma,
 * llama2, mistral, phi3. An unknown name is an error that lists them.
 *
 * Special-token forgery: before a Jinja template renders, every occurrence
 * of a control token's text (CONTROL/UNKNOWN vocabulary entries, e.g.
 * "<|im_start|>") inside request strings — message fields, tools, template
 * variables (chat_template_kwargs) and documents, object keys included — is
 * replaced by a digit placeholder, and restored after rendering; the
 * restored ranges become the prompt's plain spans. The built-in families mark
 * every role and content as plain. ifd_chat_tokenize parses special tokens
 * only outside plain spans, so user text containing "<|im_start|>" stays
 * text. If the prompt already starts with BOS, the tokenizer's own BOS is not
 * added again (never a double BOS).
 *
 * Ownership: a template object is created from (and may keep pointers into)
 * a tokenizer that must outlive it; free it with ifd_chat_template_destroy.
 * Rendered prompts are owned by the caller (ifd_chat_prompt_free).
 * Threading: a template is immutable after creation; render/tokenize may run
 * concurrently from many threads.
 */
#ifndef IFD_CHAT_TEMPLATE_H
#define IFD_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "tokenizer/tokenizer.h"

typedef enum {
    IFD_CHAT_CHATML = 0,
    IFD_CHAT_LLAMA3,
    IFD_CHAT_GEMMA,
    IFD_CHAT_LLAMA2,
    IFD_CHAT_MISTRAL,
    IFD_CHAT_PHI3,
    IFD_CHAT_FAMILY_COUNT,
    /* ifd_chat_template_family of a Jinja template none of the families
     * matches (not a name ifd_chat_family_from_name accepts) */
    IFD_CHAT_JINJA = 100
} ifd_chat_family_t;

/* Family name ("chatml", "llama3", "gemma", "llama2", "mistral", "phi3",
 * "jinja"); "?" when out of range. */
const char *ifd_chat_family_name(ifd_chat_family_t f);
/* By name (case-sensitive); IFD_ENOTFOUND when unknown. */
int ifd_chat_family_from_name(const char *name, ifd_chat_family_t *out);
/* "chatml, llama3, gemma, llama2, mistral, phi3" (static string). */
const char *ifd_chat_family_names(void);

/* Detects the family from a Jinja template string. 0 or IFD_ENOTFOUND. */
int ifd_chat_detect(const char *jinja, ifd_chat_family_t *out);

typedef struct {
    /* --chat-template: a family name, or the path of a Jinja template file;
     * NULL = the model's own template. */
    const char *name;
    /* Jinja template text to use instead of the tokenizer's, or NULL. */
    const char *jinja;
    /* Passed to Jinja templates as `date_string` (Llama 3.1 reads it) and
     * used by the built-in llama3 family; NULL = undefined for Jinja (the
     * template's own fallback), "26 Jul 2024" for the built-in family. */
    const char *date;
} ifd_chat_params_t;

ifd_chat_params_t ifd_chat_default_params(void);

typedef struct ifd_chat_template ifd_chat_template_t;

/*
 * Creates the template for tokenizer `tok` (may be NULL: then BOS/EOS text
 * and stop ids come from the family's defaults / none), in the order above.
 * Returns 0; IFD_ENOTFOUND for an unknown name, an unreadable file, or a
 * model with neither a usable template nor a recognisable vocabulary (errbuf
 * lists the known names and suggests --chat-template); IFD_ENOTSUP /
 * IFD_EFORMAT for a template file that does not parse (errbuf names the
 * construct and line); IFD_ENOMEM.
 */
int ifd_chat_template_create(ifd_chat_template_t **out, const ifd_tokenizer_t *tok,
                             const ifd_chat_params_t *params, char *errbuf, size_t errlen);
void ifd_chat_template_destroy(ifd_chat_template_t *tpl); /* NULL is a no-op */

/* The built-in family rendering, or for a Jinja template the family its
 * text looks like (for stop tokens), IFD_CHAT_JINJA when none. */
ifd_chat_family_t ifd_chat_template_family(const ifd_chat_template_t *tpl);

/* The Jinja source rendered (NUL-terminated, lives as long as tpl), or NULL
 * when a built-in family renders. Lets callers recognise the model's
 * tool-call format (e.g. "<tool_call>" in a Hermes/Qwen template). */
const char *ifd_chat_template_source(const ifd_chat_template_t *tpl);

/* Stop ids for generation: the family's end-of-turn tokens that exist in the
 * vocabulary plus the tokenizer's end-of-generation set, sorted, unique.
 * *ids lives as long as tpl. */
size_t ifd_chat_template_stop_ids(const ifd_chat_template_t *tpl, const ifd_token_t **ids);

/* One message. role: "system", "user", "assistant" (other roles render
 * verbatim where the family allows, else IFD_EINVAL). Both NUL-terminated;
 * content may be "" (never NULL). */
typedef struct {
    const char *role;
    const char *content;
} ifd_chat_msg_t;

/* A rendered prompt: text (malloc'ed, NUL-terminated) and the byte ranges of
 * message roles and contents in it (sorted, non-overlapping): the "plain"
 * spans where special tokens are never parsed. */
typedef struct {
    char *text;
    size_t len;
    ifd_span_t *content;
    size_t n_content;
} ifd_chat_prompt_t;

void ifd_chat_prompt_free(ifd_chat_prompt_t *p); /* frees the fields, zeroes p */

/*
 * Renders msgs[0..n) (n may be 0) and, with add_generation_prompt, the
 * header of the assistant's turn. Returns 0, IFD_EINVAL (a role the family
 * cannot express, the Jinja template raised, or — for a Jinja template — a
 * message that is not valid UTF-8: the message is logged),
 * IFD_ETOOBIG (a Jinja limit), IFD_ENOMEM. On error *out is zeroed.
 * Same as ifd_chat_render_request with {role, content} messages and no tools.
 */
int ifd_chat_render(const ifd_chat_template_t *tpl, const ifd_chat_msg_t *msgs, size_t n,
                    bool add_generation_prompt, ifd_chat_prompt_t *out);

/*
 * A full chat request, in the OpenAI chat-completions JSON shapes (all
 * borrowed: ifd_chat_render_request neither keeps nor modifies them).
 *
 * messages: array of objects. "role" (string) is required; "content" may be
 *   a string, null (→ ""), or an array of parts: {"type": "text", "text":
 *   …} parts alone are joined with "\n" (as vLLM does); a content with
 *   {"type": "image"} parts stays an array of text and image parts, as
 *   transformers passes it (Gemma 3's template renders <start_of_image>
 *   for each; of the built-in families only gemma renders images, each
 *   text part trimmed as its template does, the others are IFD_ENOTSUP). Assistant messages may carry "tool_calls":
 *   [{"id", "type": "function", "function": {"name", "arguments"}}] where
 *   "arguments" is a JSON string (parsed into an object for the template,
 *   as vLLM does; kept as a string when it does not parse) or an object.
 *   Messages with role "tool" carry "tool_call_id" (and optionally "name").
 *   Every other field (name, reasoning_content, …) is passed through.
 * tools: array of {"type": "function", "function": {"name", "description",
 *   "parameters"}} as in the request, or NULL (the template sees none).
 * vars: object of extra template variables (vLLM's chat_template_kwargs:
 *   enable_thinking, …, and the request's documents), or NULL. They cannot
 *   replace messages, tools or add_generation_prompt, nor — unless
 *   vars_may_override — the variables the server supplies (bos_token,
 *   eos_token, unk_token, pad_token, date_string: dropped from vars).
 *   Their strings, like the messages' and tools', are protected against
 *   special-token forgery (keys too): "<|im_start|>" in a kwarg renders as
 *   plain text, never as a control token.
 * max_time_ms, cancel: the Jinja rendering's wall-time budget (0: the
 *   library's default, 10 s) and cancel flag (NULL: none; see jinja.h).
 */
typedef struct {
    const json_t *messages;
    const json_t *tools;
    const json_t *vars;
    bool add_generation_prompt;
    bool vars_may_override;
    unsigned max_time_ms;
    const atomic_int *cancel;
} ifd_chat_request_t;

/*
 * Renders a request. With a Jinja template the context is the one
 * transformers builds: messages, tools (null when none), documents (null
 * unless vars has "documents": RAG templates' documents), add_generation_prompt,
 * bos_token, eos_token, date_string (params->date), then vars. A built-in
 * family renders role/content only.
 * Returns 0; IFD_EINVAL (malformed messages, or the template raised —
 * errbuf holds the template's message, for a 400); IFD_ENOTSUP (tools or
 * tool calls with a built-in family, which cannot express them); IFD_ETOOBIG
 * (a Jinja limit: output, loop iterations, memory, depth); IFD_ENOMEM.
 * On error *out is zeroed. errbuf may be NULL. Thread-safe (tpl is shared).
 */
int ifd_chat_render_request(const ifd_chat_template_t *tpl, const ifd_chat_request_t *req,
                            ifd_chat_prompt_t *out, char *errbuf, size_t errlen);

/* ifd_chat_render with the reason of a failure in errbuf (may be NULL)
 * instead of the log: for IFD_EINVAL the template's own raise_exception
 * message, the role a built-in family cannot express, or the message that
 * is not valid UTF-8 — text meant for the client's 400. opts gives
 * add_generation_prompt, the extra variables and the budgets as for
 * ifd_chat_render_request (its messages and tools are not used). */
int ifd_chat_render_msgs(const ifd_chat_template_t *tpl, const ifd_chat_msg_t *msgs, size_t n,
                         const ifd_chat_request_t *opts, ifd_chat_prompt_t *out, char *errbuf,
                         size_t errlen);

/*
 * Tokenizes a rendered prompt with `tok` (the template's tokenizer): special
 * tokens parsed outside message contents only; BOS prepended when the
 * tokenizer adds one and the prompt does not already start with it.
 * APPENDS to *ids. Returns 0 or an ifd_tokenizer_encode error.
 */
int ifd_chat_tokenize(const ifd_chat_template_t *tpl, const ifd_tokenizer_t *tok,
                      const ifd_chat_prompt_t *p, ifd_tokens_t *ids);

#endif
