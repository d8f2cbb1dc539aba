/*
 * test_proto_openai.c — the OpenAI JSON mapping (proto/openai.h): valid
 * chat, completions, tokenize and detokenize requests of every shape;
 * a table of invalid ones, each expected to fail with status 400 and the
 * exact `param` and `code` OpenAI would give; and every response builder,
 * its output parsed back and checked field by field (streams through the
 * SSE parser, with the OpenAI stream invariants checked chunk by chunk).
 */
#include "jsonpath.h"
#include "testutil.h"

#include "error.h"
#include "proto/openai.h"
#include "proto/responses.h"
#include "proto/sse.h"
#include "proto/toolcall.h"

#include <jansson.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------- */

/* ---- valid requests ------------------------------------------------------------------- */

/* A request as the daemon takes it: parsed, then its structured-output
 * work done (ifd_oai_build_grammar, which the daemon runs off its loop). */
static int built(int rc, ifd_arena_t *a, ifd_oai_request_t *r, ifd_oai_error_t *e)
{
    return rc ? rc : ifd_oai_build_grammar(a, r, NULL, NULL, e);
}

static int parse_chat(ifd_arena_t *a, const char *body, ifd_oai_request_t *r, ifd_oai_error_t *e)
{
    return built(ifd_oai_parse_chat(a, body, strlen(body), r, e), a, r, e);
}

static int parse_cmpl(ifd_arena_t *a, const char *body, ifd_oai_request_t *r, ifd_oai_error_t *e)
{
    return built(ifd_oai_parse_completion(a, body, strlen(body), r, e), a, r, e);
}

/* Image parts in prompt order: their URL and part, the text joined as
 * before, the template's parts (text and {"type": "image"}), and
 * mm_processor_kwargs; /v1/responses' input_image named by its input. */
START_TEST(test_chat_image_parts)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    const char *body =
        "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\","
        "\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"image_url\","
        "\"image_url\":{\"url\":\"data:image/png;base64,AAAA\",\"detail\":\"high\"}},"
        "{\"type\":\"text\",\"text\":\"b\"},{\"type\":\"image_url\",\"image_url\":"
        "{\"url\":\"https://x/y.png\"}}]}],\"mm_processor_kwargs\":{\"do_pan_and_scan\":true}}";
    ck_assert_int_eq(parse_chat(&a, body, &r, &e), 0);
    ck_assert_uint_eq(r.n_images, 2);
    ck_assert_uint_eq(r.images[0].message, 1);
    ck_assert_uint_eq(r.images[0].part, 1);
    ck_assert_str_eq(r.images[0].url, "data:image/png;base64,AAAA");
    ck_assert_uint_eq(r.images[0].url_len, strlen("data:image/png;base64,AAAA"));
    ck_assert_str_eq(r.images[0].param, "messages[1].content[1]");
    ck_assert_str_eq(r.images[1].url, "https://x/y.png");
    ck_assert_str_eq(r.images[1].param, "messages[1].content[3]");
    ck_assert_str_eq(r.messages[1].content, "a\nb");
    ck_assert_ptr_null(r.messages[0].parts_json);
    ck_assert_str_eq(r.messages[1].parts_json,
                     "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"image\"},"
                     "{\"type\":\"text\",\"text\":\"b\"},{\"type\":\"image\"}]");
    ck_assert_int_eq(r.do_pan_and_scan, 1);
    /* none: no images, pan-and-scan not given */
    ck_assert_int_eq(
        parse_chat(&a, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r, &e), 0);
    ck_assert_uint_eq(r.n_images, 0);
    ck_assert_int_eq(r.do_pan_and_scan, -1);
    /* /tokenize with messages takes no images */
    ifd_oai_tokenize_t tk;
    const char *tb = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                     "\"image_url\":{\"url\":\"data:,\"}}]}]}";
    ck_assert_int_eq(ifd_oai_parse_tokenize(&a, tb, strlen(tb), &tk, &e), IFD_EINVAL);
    ck_assert_str_eq(e.param, "messages[0].content[0].type");
    /* Responses: input_image → an image part, named by its input item */
    const char *rb = "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\","
                     "\"text\":\"what\"},{\"type\":\"input_image\",\"image_url\":"
                     "\"data:image/gif;base64,R0lG\",\"detail\":\"auto\"}]}]}";
    ck_assert_int_eq(built(ifd_responses_parse(&a, rb, strlen(rb), &r, &e), &a, &r, &e), 0);
    ck_assert_uint_eq(r.n_images, 1);
    ck_assert_str_eq(r.images[0].url, "data:image/gif;base64,R0lG");
    ck_assert_str_eq(r.images[0].param, "input[0].content[1]");
    ck_assert_ptr_nonnull(r.messages[r.n_messages - 1].parts_json);
    /* more parts than IFD_OAI_MAX_IMAGES */
    ifd_buf_t b = IFD_BUF_INIT;
    ifd_buf_puts(&b, "{\"messages\":[{\"role\":\"user\",\"content\":[");
    for (int i = 0; i <= IFD_OAI_MAX_IMAGES; i++)
        ifd_buf_printf(&b, "%s{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:,\"}}",
                       i ? "," : "");
    ifd_buf_puts(&b, "]}]}");
    ck_assert_int_eq(parse_chat(&a, b.data, &r, &e), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "Too many images"));
    ifd_buf_free(&b);
    ifd_arena_close(&a);
}
END_TEST

START_TEST(test_chat_minimal_defaults)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    ck_assert_int_eq(parse_chat(&a,
                                "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
                                "\"content\":\"Hello\"}]}",
                                &r, &e),
                     0);
    ck_assert_int_eq(r.kind, IFD_OAI_CHAT);
    ck_assert_str_eq(r.model, "m");
    ck_assert_uint_eq(r.n_messages, 1);
    ck_assert_str_eq(r.messages[0].role, "user");
    ck_assert_str_eq(r.messages[0].content, "Hello");
    ck_assert_ptr_null(r.messages[0].name);
    ck_assert_int_eq(r.max_tokens, -1);
    ck_assert(r.temperature == 1.0f && r.top_p == 1.0f && r.min_p == 0.0f);
    ck_assert_int_eq(r.top_k, 0);
    ck_assert(r.repetition_penalty == 1.0f && r.frequency_penalty == 0 && r.presence_penalty == 0);
    ck_assert(!r.has_seed && !r.stream && !r.include_usage && !r.logprobs && !r.ignore_eos);
    ck_assert(r.use_cache && r.add_generation_prompt && !r.continue_final_message);
    ck_assert_uint_eq(r.n, 1);
    ck_assert_uint_eq(r.n_stop, 0);
    ck_assert_uint_eq(r.n_logit_bias, 0);
    ck_assert_uint_eq(r.top_logprobs, 0);
    ifd_arena_close(&a);
}
END_TEST

START_TEST(test_chat_every_field)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    const char *body =
        "{\"model\":\"smol\",\"messages\":["
        "{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"name\":\"bob\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
        "{\"type\":\"text\",\"text\":\"b\\u00e9\"}]},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[]},"
        "{\"role\":\"developer\",\"content\":\"\"},"
        "{\"role\":\"assistant\",\"content\":\"Sure\"}],"
        "\"max_tokens\":50,\"max_completion_tokens\":40,\"temperature\":0.5,\"top_p\":0.9,"
        "\"top_k\":-1,\"min_p\":0.1,\"seed\":-1,\"stop\":[\"\\n\\n\",\"\",\"END\"],"
        "\"presence_penalty\":-2,\"frequency_penalty\":2,\"repetition_penalty\":1.2,"
        "\"logit_bias\":{\"50256\":-100,\"7\":2.5},\"n\":3,\"logprobs\":true,"
        "\"top_logprobs\":5,\"stream\":true,\"stream_options\":{\"include_usage\":true,"
        "\"include_obfuscation\":false},\"ignore_eos\":true,\"use_cache\":false,"
        "\"stop_token_ids\":[2,3],\"user\":\"x\",\"unknown_key\":{\"deep\":[1,2]},"
        "\"tools\":[],\"tool_choice\":\"none\",\"response_format\":{\"type\":\"text\"},"
        "\"add_generation_prompt\":false,\"continue_final_message\":true,\"echo\":true,"
        "\"chat_template_kwargs\":{\"enable_thinking\":false},"
        "\"frequency\":null}";
    int rc = parse_chat(&a, body, &r, &e);
    ck_assert_msg(rc == 0, "%s (%s)", e.message, e.param);
    ck_assert_str_eq(r.model, "smol");
    ck_assert_uint_eq(r.n_messages, 5);
    ck_assert_str_eq(r.messages[1].content, "a\nb\xc3\xa9");
    ck_assert_str_eq(r.messages[1].name, "bob");
    ck_assert_str_eq(r.messages[2].role, "assistant");
    ck_assert_str_eq(r.messages[2].content, "");
    ck_assert_str_eq(r.messages[3].role, "developer");
    ck_assert_int_eq(r.max_tokens, 40); /* max_completion_tokens wins */
    ck_assert(r.temperature == 0.5f && r.top_p == 0.9f && r.min_p == 0.1f);
    ck_assert_int_eq(r.top_k, 0);
    ck_assert(r.has_seed && r.seed == UINT64_MAX);
    ck_assert_uint_eq(r.n_stop, 2); /* the empty one is dropped */
    ck_assert_str_eq(r.stop[0], "\n\n");
    ck_assert_str_eq(r.stop[1], "END");
    ck_assert(r.presence_penalty == -2.0f && r.frequency_penalty == 2.0f);
    ck_assert(r.repetition_penalty == 1.2f);
    ck_assert_uint_eq(r.n_logit_bias, 2);
    ck_assert_int_eq(r.logit_bias[0].id, 50256);
    ck_assert(r.logit_bias[0].bias == -100.0f);
    ck_assert_int_eq(r.logit_bias[1].id, 7);
    ck_assert(r.logit_bias[1].bias == 2.5f);
    ck_assert_uint_eq(r.n, 3);
    ck_assert(r.logprobs);
    ck_assert_uint_eq(r.top_logprobs, 5);
    ck_assert(r.stream && r.include_usage && r.ignore_eos && !r.use_cache);
    ck_assert_uint_eq(r.n_stop_token_ids, 2);
    ck_assert_int_eq(r.stop_token_ids[1], 3);
    ck_assert(!r.add_generation_prompt && r.continue_final_message && r.echo);
    ck_assert_str_eq(r.template_kwargs, "{\"enable_thinking\":false}");
    ifd_arena_close(&a);
}
END_TEST

/* generation_config.json defaults fill what the request leaves out, and only
 * in range; a JSON null counts as left out. */
START_TEST(test_sampling_defaults)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    const ifd_oai_sampling_defaults_t d = {0.6f, 0.9f, 0.05f, 1.1f, 20};
    ck_assert_int_eq(parse_chat(&a, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                                &r, &e),
                     0);
    ck_assert_uint_eq(r.sampling_given, 0);
    ck_assert_uint_eq(ifd_oai_apply_sampling_defaults(&r, &d),
                      IFD_OAI_GIVEN_TEMPERATURE | IFD_OAI_GIVEN_TOP_P | IFD_OAI_GIVEN_TOP_K |
                          IFD_OAI_GIVEN_MIN_P | IFD_OAI_GIVEN_REPETITION_PENALTY);
    ck_assert(r.temperature == 0.6f && r.top_p == 0.9f && r.top_k == 20 && r.min_p == 0.05f &&
              r.repetition_penalty == 1.1f);

    /* given fields win, including a 0 and a top_k of -1 (off) */
    ck_assert_int_eq(parse_cmpl(&a,
                                "{\"prompt\":\"x\",\"temperature\":0,\"top_k\":-1,"
                                "\"top_p\":null,\"repetition_penalty\":1}",
                                &r, &e),
                     0);
    ck_assert_uint_eq(r.sampling_given, IFD_OAI_GIVEN_TEMPERATURE | IFD_OAI_GIVEN_TOP_K |
                                            IFD_OAI_GIVEN_REPETITION_PENALTY);
    ck_assert_uint_eq(ifd_oai_apply_sampling_defaults(&r, &d),
                      IFD_OAI_GIVEN_TOP_P | IFD_OAI_GIVEN_MIN_P);
    ck_assert(r.temperature == 0.0f && r.top_k == 0 && r.top_p == 0.9f &&
              r.repetition_penalty == 1.0f && r.min_p == 0.05f);

    /* absent (negative) and out-of-range model values are skipped, not clamped */
    const ifd_oai_sampling_defaults_t bad = {3.0f, 0.0f, -1.0f, 0.0f, -1};
    ck_assert_int_eq(parse_chat(&a, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                                &r, &e),
                     0);
    ck_assert_uint_eq(ifd_oai_apply_sampling_defaults(&r, &bad), 0);
    ck_assert(r.temperature == 1.0f && r.top_p == 1.0f && r.top_k == 0 && r.min_p == 0.0f &&
              r.repetition_penalty == 1.0f);
    ifd_arena_close(&a);
}
END_TEST

START_TEST(test_chat_nulls_are_absent)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    const char *body =
        "{\"model\":null,\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":null}],"
        "\"max_tokens\":null,\"temperature\":null,\"top_p\":null,\"n\":null,\"stop\":null,"
        "\"seed\":null,\"logit_bias\":null,\"logprobs\":null,\"top_logprobs\":null,"
        "\"stream\":null,\"stream_options\":null,\"tools\":null,\"response_format\":null}";
    ck_assert_int_eq(parse_chat(&a, body, &r, &e), 0);
    ck_assert_ptr_null(r.model);
    ck_assert_int_eq(r.max_tokens, -1);
    ck_assert(r.temperature == 1.0f && r.n == 1 && !r.has_seed && !r.stream);
    /* A stop string alone; max_tokens alone. */
    ck_assert_int_eq(parse_chat(&a,
                                "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                "\"stop\":\"###\",\"max_tokens\":7,\"temperature\":0}",
                                &r, &e),
                     0);
    ck_assert_uint_eq(r.n_stop, 1);
    ck_assert_str_eq(r.stop[0], "###");
    ck_assert_int_eq(r.max_tokens, 7);
    ck_assert(r.temperature == 0.0f);
    ifd_arena_close(&a);
}
END_TEST

START_TEST(test_completion_prompt_shapes)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;

    ck_assert_int_eq(parse_cmpl(&a, "{\"model\":\"m\",\"prompt\":\"Once upon\"}", &r, &e), 0);
    ck_assert_int_eq(r.kind, IFD_OAI_COMPLETION);
    ck_assert_uint_eq(r.n_prompts, 1);
    ck_assert_str_eq(r.prompts[0].text, "Once upon");
    ck_assert_uint_eq(r.prompts[0].text_len, 9);
    ck_assert_ptr_null(r.prompts[0].tokens);
    ck_assert_int_eq(r.max_tokens, IFD_OAI_DEFAULT_COMPLETION_MAX_TOKENS);
    ck_assert(!r.logprobs && !r.echo);

    ck_assert_int_eq(parse_cmpl(&a, "{\"prompt\":[\"a\",\"\",\"c\"],\"max_tokens\":3}", &r, &e), 0);
    ck_assert_uint_eq(r.n_prompts, 3);
    ck_assert_str_eq(r.prompts[1].text, "");
    ck_assert_str_eq(r.prompts[2].text, "c");
    ck_assert_int_eq(r.max_tokens, 3);

    ck_assert_int_eq(
        parse_cmpl(&a, "{\"prompt\":[1,2,2147483647],\"logprobs\":3,\"echo\":false}", &r, &e), 0);
    ck_assert_uint_eq(r.n_prompts, 1);
    ck_assert_ptr_null(r.prompts[0].text);
    ck_assert_uint_eq(r.prompts[0].n_tokens, 3);
    ck_assert_int_eq(r.prompts[0].tokens[2], 2147483647);
    ck_assert(r.logprobs && r.top_logprobs == 3 && !r.echo);
    /* echo with logprobs: the prompt's logprobs come first (gen.c) */
    ck_assert_int_eq(parse_cmpl(&a, "{\"prompt\":\"x\",\"logprobs\":1,\"echo\":true}", &r, &e),
                     0);
    ck_assert(r.echo && r.logprobs && r.top_logprobs == 1 && !r.prompt_logprobs);
    /* echo with max_tokens 0 scores the prompt alone (vLLM) */
    ck_assert_int_eq(
        parse_cmpl(&a, "{\"prompt\":\"x\",\"max_tokens\":0,\"echo\":true}", &r, &e), 0);
    ck_assert(r.echo && r.max_tokens == 0);

    ck_assert_int_eq(parse_cmpl(&a,
                                "{\"prompt\":[[5],[6,7]],\"logprobs\":0,\"best_of\":1,"
                                "\"suffix\":\"\",\"stream\":true,\"stream_options\":"
                                "{\"include_usage\":false}}",
                                &r, &e),
                     0);
    ck_assert_uint_eq(r.n_prompts, 2);
    ck_assert_uint_eq(r.prompts[1].n_tokens, 2);
    ck_assert_int_eq(r.prompts[1].tokens[1], 7);
    ck_assert(r.logprobs && r.top_logprobs == 0);
    ck_assert(r.stream && !r.include_usage);

    /* What vllm bench serve sends. */
    ck_assert_int_eq(parse_cmpl(&a,
                                "{\"model\":\"m\",\"prompt\":\"x\",\"temperature\":0.0,"
                                "\"repetition_penalty\":1.0,\"max_tokens\":128,"
                                "\"logprobs\":null,\"stream\":true,\"ignore_eos\":true,"
                                "\"stream_options\":{\"include_usage\":true}}",
                                &r, &e),
                     0);
    ck_assert(r.stream && r.include_usage && r.ignore_eos && !r.logprobs);
    ifd_arena_close(&a);
}
END_TEST

START_TEST(test_tokenize_detokenize)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_error_t e;
    ifd_oai_tokenize_t t;
    const char *b1 = "{\"model\":\"m\",\"prompt\":\"hi there\",\"add_special_tokens\":false}";
    ck_assert_int_eq(ifd_oai_parse_tokenize(&a, b1, strlen(b1), &t, &e), 0);
    ck_assert_str_eq(t.model, "m");
    ck_assert_str_eq(t.prompt, "hi there");
    ck_assert_uint_eq(t.prompt_len, 8);
    ck_assert(!t.add_special_tokens && t.add_generation_prompt && !t.return_token_strs);
    const char *b2 = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                     "\"add_generation_prompt\":false,\"return_token_strs\":true}";
    ck_assert_int_eq(ifd_oai_parse_tokenize(&a, b2, strlen(b2), &t, &e), 0);
    ck_assert_ptr_null(t.prompt);
    ck_assert_uint_eq(t.n_messages, 1);
    ck_assert(t.add_special_tokens && !t.add_generation_prompt && t.return_token_strs);

    ifd_oai_detokenize_t d;
    const char *b3 = "{\"model\":\"m\",\"tokens\":[1,0,49151]}";
    ck_assert_int_eq(ifd_oai_parse_detokenize(&a, b3, strlen(b3), &d, &e), 0);
    ck_assert_uint_eq(d.n_tokens, 3);
    ck_assert_int_eq(d.tokens[2], 49151);
    const char *b4 = "{\"tokens\":[]}";
    ck_assert_int_eq(ifd_oai_parse_detokenize(&a, b4, strlen(b4), &d, &e), 0);
    ck_assert_uint_eq(d.n_tokens, 0);
    ifd_arena_close(&a);
}
END_TEST

/* ---- invalid requests ------------------------------------------------------------------- */

enum { EP_CHAT, EP_CMPL, EP_TOK, EP_DETOK };

typedef struct {
    int ep;
    const char *body;
    const char *param; /* "" for null */
    const char *code;  /* "" for null */
} bad_case_t;

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static const bad_case_t k_bad[] = {
    /* body */
    {EP_CHAT, "{\"messages\": [", "", ""},
    {EP_CHAT, "", "", ""},
    {EP_CHAT, "{\"a\":1} trailing", "", ""},
    {EP_CHAT, "[1,2]", "", "invalid_type"},
    {EP_CHAT, "\"str\"", "", "invalid_type"},
    /* "\u0000" is text the model may read (test_nul_in_text), but never a name,
     * an id, a role or a constraint, which would be read cut short */
    {EP_CHAT, "{" MSG ",\"model\":\"smol\\u0000x\"}", "model", "invalid_value"},
    {EP_TOK, "{\"model\":\"smol\\u0000x\",\"prompt\":\"p\"}", "model", "invalid_value"},
    {EP_CHAT, "{\"messages\":[{\"role\":\"user\\u0000\",\"content\":\"x\"}]}", "messages[0].role",
     "invalid_value"},
    {EP_CHAT,
     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\\u0000x\",\"text\":\"t\"}]}]"
     "}",
     "messages[0].content[0].type", "invalid_value"},
    {EP_CHAT, "{" MSG ",\"guided_regex\":\"a\\u0000\"}", "guided_regex", "invalid_value"},
    {EP_CHAT, "{" MSG ",\"guided_choice\":[\"a\",\"b\\u0000c\"]}", "guided_choice",
     "invalid_value"},
    {EP_CHAT, "{" MSG ",\"guided_grammar\":\"root ::= \\\"a\\u0000\\\"\"}", "guided_grammar",
     "invalid_value"},
    /* in a schema: only where the converter reads it whole (test_nul_in_schema) */
    {EP_CHAT,
     "{" MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"s\","
     "\"schema\":{\"required\":[\"a\\u0000b\"]}}}}",
     "response_format.json_schema.schema", "unsupported_value"},
    {EP_CHAT, "{" MSG ",\"response_format\":{\"type\":\"text\\u0000\"}}", "response_format.type",
     "invalid_value"},
    {EP_CHAT, "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\\u0000g\"}}]}",
     "tools[0].function.name", "invalid_value"},
    {EP_CHAT,
     "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
     "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\\u0000\"}}}}}],"
     "\"tool_choice\":\"required\"}",
     "tools[0].function.parameters", "unsupported_value"},
    {EP_CHAT,
     "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
     "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\\u0000\"}}}",
     "tool_choice.function.name", "invalid_value"},
    {EP_CHAT,
     "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
     "\"tool_choice\":\"auto\\u0000\"}",
     "tool_choice", "invalid_value"},
    {EP_CHAT, "{" MSG ",\"metadata\":{\"k\\u0000\":\"v\"}}", "", ""}, /* the parser's refusal */
    /* messages */
    {EP_CHAT, "{}", "messages", "missing_required_parameter"},
    {EP_CHAT, "{\"messages\":\"hi\"}", "messages", "invalid_type"},
    {EP_CHAT, "{\"messages\":[]}", "messages", "empty_array"},
    {EP_CHAT, "{\"messages\":[1]}", "messages[0]", "invalid_type"},
    {EP_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role",
     "missing_required_parameter"},
    {EP_CHAT, "{\"messages\":[{\"role\":5,\"content\":\"x\"}]}", "messages[0].role",
     "invalid_type"},
    {EP_CHAT, "{\"messages\":[{\"role\":\"\",\"content\":\"x\"}]}", "messages[0].role",
     "invalid_value"},
    {EP_CHAT, "{\"messages\":[{\"role\":\"ro\\u0000bot\",\"content\":\"x\"}]}", "messages[0].role",
     "invalid_value"},
    {EP_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content",
     "missing_required_parameter"},
    {EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content",
     "invalid_type"},
    {EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[\"x\"]}]}", "messages[0].content[0]",
     "invalid_type"},
    /* image parts: the shape is checked here, the URL by the daemon (images.h) */
    {EP_CHAT,
     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
     "{\"type\":\"input_image\",\"image_url\":{\"url\":\"x\"}}]}]}",
     "messages[0].content[1].type", "invalid_value"},
    {EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
     "messages[0].content[0].image_url", "missing_required_parameter"},
    {EP_CHAT,
     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
     "\"image_url\":\"data:,\"}]}]}",
     "messages[0].content[0].image_url", "invalid_type"},
    {EP_CHAT,
     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
     "\"image_url\":{\"detail\":\"low\"}}]}]}",
     "messages[0].content[0].image_url.url", "missing_required_parameter"},
    {EP_CHAT,
     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
     "\"image_url\":{\"url\":7}}]}]}",
     "messages[0].content[0].image_url.url", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"mm_processor_kwargs\":[]}", "mm_processor_kwargs", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"mm_processor_kwargs\":{\"do_pan_and_scan\":1}}",
     "mm_processor_kwargs.do_pan_and_scan", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"mm_processor_kwargs\":{\"num_crops\":1}}",
     "mm_processor_kwargs.num_crops", "unsupported_parameter"},
    {EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
     "messages[0].content[0].text", "missing_required_parameter"},
    {EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"a\"}]}]}",
     "messages[0].content[0].type", "missing_required_parameter"},
    {EP_CHAT,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\","
     "\"content\":\"b\"},{\"role\":\"user\",\"content\":7}]}",
     "messages[2].content", "invalid_type"},
    {EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":5}]}",
     "messages[0].name", "invalid_type"},
    /* scalar fields */
    {EP_CHAT, "{" MSG ",\"model\":5}", "model", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"temperature\":\"hot\"}", "temperature", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"temperature\":2.5}", "temperature", "decimal_above_max_value"},
    {EP_CHAT, "{" MSG ",\"temperature\":-0.1}", "temperature", "decimal_below_min_value"},
    {EP_CHAT, "{" MSG ",\"top_p\":1.5}", "top_p", "decimal_above_max_value"},
    {EP_CHAT, "{" MSG ",\"top_p\":true}", "top_p", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"top_k\":-2}", "top_k", "integer_below_min_value"},
    {EP_CHAT, "{" MSG ",\"top_k\":1.5}", "top_k", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"min_p\":2}", "min_p", "decimal_above_max_value"},
    {EP_CHAT, "{" MSG ",\"frequency_penalty\":3}", "frequency_penalty", "decimal_above_max_value"},
    {EP_CHAT, "{" MSG ",\"presence_penalty\":-3}", "presence_penalty", "decimal_below_min_value"},
    {EP_CHAT, "{" MSG ",\"repetition_penalty\":0}", "repetition_penalty",
     "decimal_below_min_value"},
    {EP_CHAT, "{" MSG ",\"max_tokens\":-5}", "max_tokens", "integer_below_min_value"},
    {EP_CHAT, "{" MSG ",\"max_tokens\":0}", "max_tokens", "integer_below_min_value"},
    {EP_CHAT, "{" MSG ",\"max_tokens\":1.5}", "max_tokens", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"max_tokens\":\"10\"}", "max_tokens", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"max_tokens\":1099511627776}", "max_tokens", "integer_above_max_value"},
    {EP_CHAT, "{" MSG ",\"max_tokens\":5,\"max_completion_tokens\":-1}", "max_completion_tokens",
     "integer_below_min_value"},
    {EP_CHAT, "{" MSG ",\"max_tokens\":-1,\"max_completion_tokens\":5}", "max_tokens",
     "integer_below_min_value"},
    {EP_CHAT, "{" MSG ",\"n\":0}", "n", "integer_below_min_value"},
    {EP_CHAT, "{" MSG ",\"n\":129}", "n", "integer_above_max_value"},
    {EP_CHAT, "{" MSG ",\"seed\":\"x\"}", "seed", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"seed\":1.5}", "seed", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"stop\":5}", "stop", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop",
     "array_above_max_length"},
    {EP_CHAT, "{" MSG ",\"stop\":[\"a\",1]}", "stop[1]", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"stop_token_ids\":[-1]}", "stop_token_ids[0]", "integer_below_min_value"},
    {EP_CHAT, "{" MSG ",\"logit_bias\":[1]}", "logit_bias", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"logit_bias\":{\"abc\":1}}", "logit_bias", "invalid_value"},
    {EP_CHAT, "{" MSG ",\"logit_bias\":{\"-5\":1}}", "logit_bias", "invalid_value"},
    {EP_CHAT, "{" MSG ",\"logit_bias\":{\"99999999999\":1}}", "logit_bias", "invalid_value"},
    {EP_CHAT, "{" MSG ",\"logit_bias\":{\"5\":200}}", "logit_bias", "decimal_above_max_value"},
    {EP_CHAT, "{" MSG ",\"logit_bias\":{\"5\":\"x\"}}", "logit_bias", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"stream\":\"yes\"}", "stream", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"stream_options\":{\"include_usage\":true}}", "stream_options",
     "invalid_value"},
    {EP_CHAT, "{" MSG ",\"stream\":true,\"stream_options\":5}", "stream_options", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"stream\":true,\"stream_options\":{\"include_usage\":1}}",
     "stream_options.include_usage", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"logprobs\":1}", "logprobs", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"logprobs\":true,\"top_logprobs\":-2}", "top_logprobs",
     "integer_below_min_value"},
    {EP_CMPL, "{\"prompt\":\"x\",\"logprobs\":2147483648}", "logprobs", "integer_above_max_value"},
    {EP_CHAT, "{" MSG ",\"top_logprobs\":2}", "top_logprobs", "invalid_value"},
    {EP_CHAT, "{" MSG ",\"ignore_eos\":\"no\"}", "ignore_eos", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"use_cache\":0}", "use_cache", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"tools\":[{\"type\":\"function\"}]}", "tools[0].function",
     "missing_required_parameter"},
    {EP_CHAT, "{" MSG ",\"tools\":[{\"type\":\"x\",\"function\":{}}]}", "tools[0].type",
     "invalid_value"},
    {EP_CHAT, "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}",
     "tools[0].function.name", "invalid_value"},
    /* what neither a grammar nor the check evaluates: refused in a strict tool, and a
     * schema nothing satisfies in a forced one */
    {EP_CHAT,
     "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
     "\"strict\":true,\"parameters\":{\"type\":\"object\",\"$dynamicRef\":\"#a\"}}}]}",
     "tools[0].function.parameters", "unsupported_value"},
    {EP_CHAT,
     "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
     "{\"type\":\"function\",\"function\":{\"name\":\"g\",\"parameters\":{\"not\":{}}}}],"
     "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}",
     "tools[1].function.parameters", "unsupported_value"},
    {EP_CHAT,
     "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
     "\"parameters\":{\"not\":{}}}}],\"tool_choice\":\"required\"}",
     "tools[0].function.parameters", "unsupported_value"},
    {EP_CHAT,
     "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
     "\"strict\":1}}]}",
     "tools[0].function.strict", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"tool_choice\":\"required\"}", "tool_choice", "invalid_value"},
    {EP_CHAT,
     "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
     "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}",
     "tool_choice.function.name", "invalid_value"},
    /* a name of the wrong type is named as such, not as missing */
    {EP_CHAT,
     "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
     "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":5}}}",
     "tool_choice.function.name", "invalid_type"},
    {EP_CHAT,
     "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
     "\"tool_choice\":{\"type\":\"function\",\"function\":{}}}",
     "tool_choice.function.name", "missing_required_parameter"},
    {EP_CHAT,
     "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
     "\"tool_choice\":{\"type\":\"function\",\"function\":\"f\"}}",
     "tool_choice.function", "invalid_type"},
    {EP_CHAT,
     "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
     "\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}",
     "tool_choice", "invalid_value"},
    {EP_CHAT, "{" MSG ",\"response_format\":{\"type\":\"xml\"}}", "response_format.type",
     "invalid_value"},
    {EP_CHAT,
     "{" MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
     "\"x\",\"schema\":{\"type\":\"object\",\"$dynamicRef\":\"#a\"}}}}",
     "response_format.json_schema.schema", "unsupported_value"},
    {EP_CHAT, "{" MSG ",\"guided_regex\":\"(?=x)\"}", "guided_regex", "unsupported_value"},
    {EP_CHAT, "{" MSG ",\"guided_grammar\":\"root ::= foo\"}", "guided_grammar", "invalid_value"},
    {EP_CHAT, "{" MSG ",\"guided_choice\":[]}", "guided_choice", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"guided_json\":\"{bad\"}", "guided_json", "invalid_value"},
    {EP_CHAT, "{" MSG ",\"guided_regex\":\"a\",\"guided_choice\":[\"a\"]}", "guided_choice",
     "invalid_value"},
    {EP_CHAT, "{" MSG ",\"structured_outputs\":{\"regex\":\"a\",\"choice\":[\"a\"]}}",
     "structured_outputs", "invalid_value"},
    {EP_CHAT, "{" MSG ",\"structured_outputs\":{\"structural_tag\":\"x\"}}",
     "structured_outputs.structural_tag", "unsupported_parameter"},
    {EP_CHAT, "{" MSG ",\"min_tokens\":-1}", "min_tokens", "integer_below_min_value"},
    {EP_CHAT, "{" MSG ",\"speculative\":\"yes\"}", "speculative", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"speculative\":{\"num_speculative_tokens\":0}}",
     "speculative.num_speculative_tokens", "integer_below_min_value"},
    {EP_CHAT, "{" MSG ",\"speculative\":{\"prompt_lookup_max\":17}}",
     "speculative.prompt_lookup_max", "integer_above_max_value"},
    {EP_CHAT, "{" MSG ",\"speculative\":{\"method\":\"eagle\"}}", "speculative.method",
     "invalid_value"},
    {EP_CHAT, "{" MSG ",\"speculative\":{\"prompt_lookup_min\":3,\"prompt_lookup_max\":2}}",
     "speculative.prompt_lookup_min", "invalid_value"},
    {EP_CHAT, "{" MSG ",\"speculative\":{\"draft_model\":\"x\"}}", "speculative.draft_model",
     "invalid_value"},
    {EP_CHAT, "{" MSG ",\"max_tokens\":4,\"min_tokens\":5}", "min_tokens", "invalid_value"},
    {EP_CHAT, "{" MSG ",\"prompt_logprobs\":2147483648}", "prompt_logprobs",
     "integer_above_max_value"},
    {EP_CHAT, "{" MSG ",\"prompt_logprobs\":-3}", "prompt_logprobs", "integer_below_min_value"},
    {EP_CHAT, "{" MSG ",\"prompt_logprobs\":-2}", "prompt_logprobs", "integer_below_min_value"},
    {EP_CHAT, "{" MSG ",\"prompt_logprobs\":true}", "prompt_logprobs", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"prompt_logprobs\":1.5}", "prompt_logprobs", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"stream\":true,\"prompt_logprobs\":1}", "prompt_logprobs",
     "invalid_value"},
    {EP_CMPL, "{\"prompt\":\"x\",\"stream\":true,\"prompt_logprobs\":3}", "prompt_logprobs",
     "invalid_value"},
    {EP_CHAT, "{" MSG ",\"echo\":1}", "echo", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"continue_final_message\":true,\"add_generation_prompt\":false}",
     "continue_final_message", "invalid_value"}, /* the last message is the user's */
    {EP_CHAT, "{" MSG ",\"chat_template_kwargs\":[1]}", "chat_template_kwargs", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"documents\":{}}", "documents", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"documents\":[{},3]}", "documents[1]", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"chat_template_kwargs\":{\"add_generation_prompt\":false}}",
     "chat_template_kwargs.add_generation_prompt", "invalid_value"},
    {EP_CHAT, "{" MSG ",\"stream\":true,\"stream_options\":{\"continuous_usage_stats\":1}}",
     "stream_options.continuous_usage_stats", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"priority\":1.5}", "priority", "invalid_type"},
    {EP_CHAT, "{" MSG ",\"truncate_prompt_tokens\":0}", "truncate_prompt_tokens",
     "integer_below_min_value"},
    {EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]}",
     "messages[0].tool_calls", "invalid_value"},
    {EP_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{}}]}]}",
     "messages[0].tool_calls[0].function.name", "missing_required_parameter"},
    {EP_CHAT, "{" MSG ",\"modalities\":[\"text\",\"audio\"]}", "modalities",
     "unsupported_parameter"},
    {EP_CMPL, "{\"prompt\":\"x\",\"use_beam_search\":true}", "use_beam_search",
     "unsupported_parameter"},
    {EP_CHAT, "{" MSG ",\"add_generation_prompt\":1}", "add_generation_prompt", "invalid_type"},
    /* completions */
    {EP_CMPL, "{}", "prompt", "missing_required_parameter"},
    {EP_CMPL, "{\"prompt\":5}", "prompt", "invalid_type"},
    {EP_CMPL, "{\"prompt\":[]}", "prompt", "empty_array"},
    {EP_CMPL, "{\"prompt\":[\"a\",5]}", "prompt[1]", "invalid_type"},
    {EP_CMPL, "{\"prompt\":[1,\"a\"]}", "prompt[1]", "invalid_type"},
    {EP_CMPL, "{\"prompt\":[1,-2]}", "prompt[1]", "integer_below_min_value"},
    {EP_CMPL, "{\"prompt\":[[1,2],[]]}", "prompt[1]", "empty_array"},
    {EP_CMPL, "{\"prompt\":[[1],[2,3000000000]]}", "prompt[1][1]", "integer_above_max_value"},
    {EP_CMPL, "{\"prompt\":[{}]}", "prompt[0]", "invalid_type"},
    {EP_CMPL, "{\"prompt\":[true]}", "prompt[0]", "invalid_type"},
    {EP_CMPL, "{\"prompt\":\"x\",\"logprobs\":true}", "logprobs", "invalid_type"},
    {EP_CMPL, "{\"prompt\":\"x\",\"logprobs\":-2}", "logprobs", "integer_below_min_value"},
    {EP_CMPL, "{\"prompt\":\"x\",\"echo\":1}", "echo", "invalid_type"},
    {EP_CMPL, "{\"prompt\":\"x\",\"suffix\":\"end\"}", "suffix", "unsupported_parameter"},
    {EP_CMPL, "{\"prompt\":\"x\",\"best_of\":2}", "best_of", "unsupported_value"},
    {EP_CMPL, "{\"prompt\":\"x\",\"n\":2,\"best_of\":1}", "best_of", "invalid_value"},
    {EP_CMPL, "{\"prompt\":\"x\",\"max_tokens\":-1}", "max_tokens", "integer_below_min_value"},
    {EP_CMPL, "{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens", "integer_below_min_value"},
    {EP_CMPL, "{\"prompt\":\"x\",\"temperature\":3}", "temperature", "decimal_above_max_value"},
    /* tokenize / detokenize */
    {EP_TOK, "{}", "prompt", "missing_required_parameter"},
    {EP_TOK, "{\"prompt\":5}", "prompt", "invalid_type"},
    {EP_TOK, "{\"prompt\":\"x\"," MSG "}", "messages", "invalid_value"},
    {EP_TOK, "{\"messages\":[{\"role\":\"\",\"content\":\"y\"}]}", "messages[0].role",
     "invalid_value"},
    {EP_TOK, "{\"prompt\":\"x\",\"add_special_tokens\":\"x\"}", "add_special_tokens",
     "invalid_type"},
    {EP_DETOK, "{}", "tokens", "missing_required_parameter"},
    {EP_DETOK, "{\"tokens\":\"x\"}", "tokens", "invalid_type"},
    {EP_DETOK, "{\"tokens\":[1,\"a\"]}", "tokens[1]", "invalid_type"},
    {EP_DETOK, "{\"tokens\":[1,2.0]}", "tokens[1]", "invalid_type"},
};

static int parse_any(ifd_arena_t *a, int ep, const char *body, size_t len, ifd_oai_error_t *e)
{
    ifd_oai_request_t r;
    ifd_oai_tokenize_t t;
    ifd_oai_detokenize_t d;
    switch (ep) {
    case EP_CHAT:
        return built(ifd_oai_parse_chat(a, body, len, &r, e), a, &r, e);
    case EP_CMPL:
        return built(ifd_oai_parse_completion(a, body, len, &r, e), a, &r, e);
    case EP_TOK:
        return ifd_oai_parse_tokenize(a, body, len, &t, e);
    default:
        return ifd_oai_parse_detokenize(a, body, len, &d, e);
    }
}

START_TEST(test_invalid_requests)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    for (size_t i = 0; i < sizeof(k_bad) / sizeof(k_bad[0]); i++) {
        const bad_case_t *c = &k_bad[i];
        ifd_oai_error_t e;
        memset(&e, 0x55, sizeof(e));
        int rc = parse_any(&a, c->ep, c->body, strlen(c->body), &e);
        ck_assert_msg(rc == IFD_EINVAL, "case %zu (%s): rc %s", i, c->body, ifd_err_name(rc));
        ck_assert_int_eq(e.status, 400);
        ck_assert_str_eq(e.type, "invalid_request_error");
        ck_assert_msg(strcmp(e.param, c->param) == 0, "case %zu (%s): param '%s', want '%s'", i,
                      c->body, e.param, c->param);
        ck_assert_msg(strcmp(e.code, c->code) == 0, "case %zu (%s): code '%s', want '%s'", i,
                      c->body, e.code, c->code);
        ck_assert(strlen(e.message) > 10);
        /* Messages quote the param the way OpenAI does. */
        if (c->param[0] && strcmp(c->code, "invalid_value") != 0 &&
            strcmp(c->code, "unsupported_parameter") != 0 &&
            strcmp(c->code, "unsupported_value") != 0)
            ck_assert_msg(strstr(e.message, c->param), "case %zu: %s", i, e.message);
    }
    ifd_arena_close(&a);
}
END_TEST

/* "\u0000" is accepted where vLLM accepts it and kept whole in text the
 * model reads: contents (strings and text parts), prompts, stop strings,
 * tool descriptions and arguments, the JSON the templates render, and the
 * Responses input and instructions. */
/* "\u0000" in a schema's pattern, enum and const strings: read whole, the
 * grammar writing it as the JSON escape; a tool shown to the model is never
 * refused for it. */
START_TEST(test_nul_in_schema)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    const char *body =
        "{" MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
        "\"s\",\"schema\":{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"string\","
        "\"pattern\":\"^[^\\u0000]+$\"},\"e\":{\"enum\":[\"a\\u0000b\"]}},\"required\":[\"p\","
        "\"e\"]}}}}";
    ck_assert_int_eq(parse_chat(&a, body, &r, &e), 0);
    ck_assert_ptr_nonnull(r.grammar);
    ck_assert(!memchr(r.grammar, '\0', r.grammar_len)); /* the grammar text has no NUL */
    body = "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
           "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":"
           "\"#\\u0000\"}}}}}]}";
    ck_assert_int_eq(parse_chat(&a, body, &r, &e), 0);
    ifd_arena_close(&a);
}
END_TEST

/* Integers beyond int64 in a request (a schema's 20-digit bound): read as
 * doubles, the grammar built; one inside an enum that a double would round:
 * a 400 naming it. */
/* A strict tool binds where it may be called: under auto; with tool_choice
 * "none" or another tool named it is only shown, never refused for its
 * schema (vLLM accepts these requests). */
START_TEST(test_strict_tools_enforced_when_callable)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
#define TOOLS                                                                                      \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\","    \
    "\"function\":{\"name\":\"g\",\"strict\":true,\"parameters\":{\"type\":\"object\","             \
    "\"$dynamicRef\":\"#m\"}}}]"
    const char *ok[] = {
        "{" MSG "," TOOLS ",\"tool_choice\":\"none\"}",
        "{" MSG "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}}",
    };
    for (size_t i = 0; i < 2; i++) {
        ck_assert_msg(parse_chat(&a, ok[i], &r, &e) == 0, "%s: %s", ok[i], e.message);
        ck_assert(!ifd_oai_tool_enforced(&r, 1));
    }
    const char *auto_body = "{" MSG "," TOOLS "}";
    ck_assert_int_eq(parse_chat(&a, auto_body, &r, &e), IFD_EINVAL);
    ck_assert_str_eq(e.param, "tools[1].function.parameters");
#undef TOOLS
    ifd_arena_close(&a);
}
END_TEST

START_TEST(test_big_integers_in_schema)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    const char *body =
        "{" MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
        "\"s\",\"schema\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":"
        "18446744073709551615}}}}";
    ck_assert_int_eq(parse_chat(&a, body, &r, &e), 0);
    ck_assert_ptr_nonnull(r.grammar);
    body = "{" MSG ",\"structured_outputs\":{\"json\":{\"enum\":[18446744073709551615]}}}";
    ck_assert_int_eq(parse_chat(&a, body, &r, &e), IFD_EINVAL);
    ck_assert_msg(strstr(e.message, "18446744073709551615 in an 'enum'"), "%s", e.message);
    /* the schema as a JSON string (vLLM's form) */
    body = "{" MSG ",\"structured_outputs\":{\"json\":\"{\\\"type\\\":\\\"integer\\\","
           "\\\"maximum\\\":-99999999999999999999999}\"}}";
    ck_assert_int_eq(parse_chat(&a, body, &r, &e), IFD_EINVAL);
    ck_assert_msg(strstr(e.message, "maximum"), "%s", e.message); /* no integer below it */
    ifd_arena_close(&a);
}
END_TEST

START_TEST(test_nul_in_text)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    const char *body =
        "{\"messages\":[{\"role\":\"system\",\"content\":\"s\\u0000t\"},"
        "{\"role\":\"user\",\"name\":\"n\\u0000m\",\"content\":[{\"type\":\"text\",\"text\":"
        "\"a\\u0000\"},{\"type\":\"text\",\"text\":\"\\u0000b\"}]}],"
        "\"stop\":[\"x\\u0000y\",\"z\"],\"chat_template_kwargs\":{\"v\":\"k\\u0000w\"},"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"description\":\"d\\u0000e\"}}]}";
    ck_assert_int_eq(parse_chat(&a, body, &r, &e), 0);
    ck_assert_uint_eq(r.messages[0].content_len, 3);
    ck_assert(!memcmp(r.messages[0].content, "s\0t", 4));
    ck_assert_uint_eq(r.messages[1].content_len, 5); /* "a\0" "\n" "\0b" */
    ck_assert(!memcmp(r.messages[1].content, "a\0\n\0b", 6));
    ck_assert_uint_eq(r.n_stop, 2);
    ck_assert_uint_eq(r.stop_len[0], 3);
    ck_assert(!memcmp(r.stop[0], "x\0y", 4));
    ck_assert_uint_eq(r.stop_len[1], 1);
    /* the JSON copies the templates render keep every byte */
    ck_assert_ptr_nonnull(strstr(r.messages_json, "\"s\\u0000t\""));
    ck_assert_ptr_nonnull(strstr(r.messages_json, "\"n\\u0000m\""));
    ck_assert_ptr_nonnull(strstr(r.tools_json, "\"d\\u0000e\""));
    ck_assert_ptr_nonnull(strstr(r.template_kwargs, "\"k\\u0000w\""));
    json_t *m = json_loads(r.messages_json, JSON_ALLOW_NUL, NULL);
    ck_assert_uint_eq(json_string_length(json_object_get(json_array_get(m, 0), "content")), 3);
    json_decref(m);
    /* completions and /tokenize prompts */
    ck_assert_int_eq(parse_cmpl(&a, "{\"prompt\":[\"p\\u0000q\",\"\\u0000\"]}", &r, &e), 0);
    ck_assert_uint_eq(r.prompts[0].text_len, 3);
    ck_assert(!memcmp(r.prompts[0].text, "p\0q", 4));
    ck_assert_uint_eq(r.prompts[1].text_len, 1);
    ifd_oai_tokenize_t t;
    const char *tok = "{\"prompt\":\"a\\u0000\"}";
    ck_assert_int_eq(ifd_oai_parse_tokenize(&a, tok, strlen(tok), &t, &e), 0);
    ck_assert_uint_eq(t.prompt_len, 2);
    /* Responses: instructions, input text and function call arguments */
    body =
        "{\"instructions\":\"i\\u0000j\",\"input\":[{\"role\":\"user\",\"content\":\"u\\u0000\"},"
        "{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":"
        "\"{\\\"a\\\":\\\"\\\\u0000\\\"}\"}],\"metadata\":{\"k\":\"v\\u0000\"}}";
    ck_assert_int_eq(ifd_responses_parse(&a, body, strlen(body), &r, &e), 0);
    ck_assert_uint_eq(r.messages[0].content_len, 3);
    ck_assert(!memcmp(r.messages[0].content, "i\0j", 4));
    ck_assert_uint_eq(r.messages[1].content_len, 2);
    ck_assert_ptr_nonnull(strstr(r.responses_echo, "\"i\\u0000j\""));
    ck_assert_ptr_nonnull(strstr(r.responses_echo, "\"v\\u0000\""));
    ifd_buf_t conv = IFD_BUF_INIT;
    ifd_oai_choice_t ans = {.text = "o\0k", .text_len = 3};
    ck_assert_int_eq(ifd_responses_conversation(&conv, &r, &ans), 0);
    ck_assert_ptr_nonnull(strstr(conv.data, "\"u\\u0000\""));
    ck_assert_ptr_nonnull(strstr(conv.data, "\"o\\u0000k\""));
    ifd_buf_free(&conv);
    ifd_arena_close(&a);
}
END_TEST

START_TEST(test_invalid_wording_and_limits)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_error_t e;
    ifd_oai_request_t r;
    ck_assert_int_eq(parse_chat(&a, "{" MSG ",\"max_tokens\":1.5}", &r, &e), IFD_EINVAL);
    ck_assert_str_eq(e.message, "Invalid type for 'max_tokens': expected an integer, but got a "
                                "decimal number instead.");
    ck_assert_int_eq(parse_chat(&a, "{" MSG ",\"temperature\":3}", &r, &e), IFD_EINVAL);
    ck_assert_str_eq(e.message, "Invalid 'temperature': decimal above maximum value. Expected "
                                "a value <= 2, but got 3 instead.");
    ck_assert_int_eq(parse_chat(&a, "{}", &r, &e), IFD_EINVAL);
    ck_assert_str_eq(e.message, "Missing required parameter: 'messages'.");
    ck_assert_int_eq(parse_chat(&a, "{\"messages\":[", &r, &e), IFD_EINVAL);
    ck_assert(strstr(e.message, "could not parse the JSON body"));

    /* 257 prompts are too many; 256 are fine. */
    ifd_buf_t b = IFD_BUF_INIT;
    ifd_buf_puts(&b, "{\"prompt\":[");
    for (int i = 0; i < 257; i++)
        ifd_buf_printf(&b, "%s\"p%d\"", i ? "," : "", i);
    ifd_buf_puts(&b, "]}");
    ck_assert_int_eq(ifd_oai_parse_completion(&a, b.data, b.len, &r, &e), IFD_EINVAL);
    ck_assert_str_eq(e.param, "prompt");
    ck_assert_str_eq(e.code, "array_above_max_length");
    ifd_buf_clear(&b);
    ifd_buf_puts(&b, "{\"prompt\":[");
    for (int i = 0; i < 256; i++)
        ifd_buf_printf(&b, "%s\"p%d\"", i ? "," : "", i);
    ifd_buf_puts(&b, "]}");
    ck_assert_int_eq(ifd_oai_parse_completion(&a, b.data, b.len, &r, &e), 0);
    ck_assert_uint_eq(r.n_prompts, 256);
    ck_assert_str_eq(r.prompts[255].text, "p255");
    /* A body that is not NUL-terminated is read only up to len. */
    ck_assert_int_eq(ifd_oai_parse_completion(&a, "{\"prompt\":\"x\"}GARBAGE", 14, &r, &e), 0);
    ifd_buf_free(&b);
    ifd_arena_close(&a);
}
END_TEST

/* ---- responses ------------------------------------------------------------------------------ */

static const ifd_oai_meta_t k_chat_meta = {IFD_OAI_CHAT, "chatcmpl-abc", "smol", 1700000000, NULL,
                                           NULL};
static const ifd_oai_meta_t k_cmpl_meta = {IFD_OAI_COMPLETION, "cmpl-xyz", "smol", 1700000001,
                                           "fp_inferd", NULL};

START_TEST(test_error_json)
{
    ifd_oai_error_t e;
    ifd_oai_error_set(&e, 404, NULL, "model_not_found", "model", "The model '%s' does not exist",
                      "gpt-9");
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_oai_error_json(&b, &e), 0);
    json_t *j = load(b.data, b.len);
    ck_assert_str_eq(js(j, "error.message"), "The model 'gpt-9' does not exist");
    ck_assert_str_eq(js(j, "error.type"), "invalid_request_error");
    ck_assert_str_eq(js(j, "error.param"), "model");
    ck_assert_str_eq(js(j, "error.code"), "model_not_found");
    json_decref(j);

    ifd_oai_error_set(&e, 500, NULL, NULL, NULL, "boom");
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_oai_error_json(&b, &e), 0);
    j = load(b.data, b.len);
    ck_assert(jnull(j, "error.param") && jnull(j, "error.code"));
    ck_assert_str_eq(js(j, "error.type"), "server_error");
    json_decref(j);
    ck_assert_str_eq(ifd_oai_error_type(401), "authentication_error");
    ck_assert_str_eq(ifd_oai_error_type(503), "service_unavailable_error");
    ck_assert_str_eq(ifd_oai_error_type(413), "invalid_request_error");
    ck_assert_str_eq(ifd_oai_error_type(429), "rate_limit_error");

    /* A message that echoes raw input with invalid UTF-8 still serializes. */
    ifd_oai_error_set(&e, 404, NULL, "not_found", NULL, "Unknown route: GET /%s", "\xff\xfe");
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_oai_error_json(&b, &e), 0);
    j = load(b.data, b.len);
    ck_assert(strncmp(js(j, "error.message"), "Unknown route: GET /", 20) == 0);
    json_decref(j);
    ifd_oai_error_set(&e, 500, NULL, NULL, NULL, "boom");

    /* In a stream: one SSE event. */
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_oai_stream_error(&b, &e), 0);
    ck_assert(strncmp(b.data, "data: {\"error\":{\"message\":\"boom\"", 32) == 0);
    ck_assert(strcmp(b.data + b.len - 2, "\n\n") == 0);
    ck_assert(memchr(b.data, '\n', b.len - 2) == NULL);
    ifd_buf_free(&b);
}
END_TEST

START_TEST(test_chat_response)
{
    ifd_oai_top_logprob_t top[2] = {{"Hi", 2, -0.1f}, {"\xe2\x80", 2, -2.5f}};
    ifd_oai_logprob_t lp[2] = {{"Hi", 2, -0.1f, top, 2, false},
                               {"\xff!", 2, -INFINITY, NULL, 0, false}};
    ifd_oai_choice_t ch[2] = {
        {.index = 0,
         .text = "Hi \xe2\x80\x94 there",
         .text_len = 12,
         .finish_reason = "stop",
         .has_logprobs = true,
         .logprobs = lp,
         .n_logprobs = 2},
        {.index = 1, .text = NULL, .text_len = 0, .finish_reason = "length"},
    };
    ifd_oai_usage_t u = {10, 5, 8};
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_oai_response_json(&b, &k_chat_meta, ch, 2, &u), 0);
    json_t *j = load(b.data, b.len);
    ck_assert_str_eq(js(j, "id"), "chatcmpl-abc");
    ck_assert_str_eq(js(j, "object"), "chat.completion");
    ck_assert_int_eq(ji(j, "created"), 1700000000);
    ck_assert_str_eq(js(j, "model"), "smol");
    ck_assert_ptr_null(jp(j, "system_fingerprint"));
    ck_assert_int_eq(ji(j, "choices.0.index"), 0);
    ck_assert_str_eq(js(j, "choices.0.message.role"), "assistant");
    ck_assert_str_eq(js(j, "choices.0.message.content"), "Hi \xe2\x80\x94 there");
    ck_assert_str_eq(js(j, "choices.0.finish_reason"), "stop");
    ck_assert_str_eq(js(j, "choices.0.logprobs.content.0.token"), "Hi");
    ck_assert(fabs(jnum(j, "choices.0.logprobs.content.0.logprob") + 0.1) < 1e-6);
    ck_assert_int_eq(ji(j, "choices.0.logprobs.content.0.bytes.1"), 'i');
    ck_assert_str_eq(js(j, "choices.0.logprobs.content.0.top_logprobs.1.token"), "\xef\xbf\xbd");
    ck_assert_int_eq(ji(j, "choices.0.logprobs.content.0.top_logprobs.1.bytes.0"), 0xe2);
    ck_assert_int_eq(ji(j, "choices.0.logprobs.content.0.top_logprobs.1.bytes.1"), 0x80);
    /* invalid byte → U+FFFD, raw bytes kept; -inf → -9999.0 */
    ck_assert_str_eq(js(j, "choices.0.logprobs.content.1.token"), "\xef\xbf\xbd!");
    ck_assert_int_eq(ji(j, "choices.0.logprobs.content.1.bytes.0"), 255);
    ck_assert(jnum(j, "choices.0.logprobs.content.1.logprob") == -9999.0);
    ck_assert_uint_eq(json_array_size(jp(j, "choices.0.logprobs.content.1.top_logprobs")), 0);
    ck_assert_str_eq(js(j, "choices.1.message.content"), "");
    ck_assert(jnull(j, "choices.1.logprobs"));
    ck_assert_str_eq(js(j, "choices.1.finish_reason"), "length");
    ck_assert_int_eq(ji(j, "usage.prompt_tokens"), 10);
    ck_assert_int_eq(ji(j, "usage.completion_tokens"), 5);
    ck_assert_int_eq(ji(j, "usage.total_tokens"), 15);
    ck_assert_int_eq(ji(j, "usage.prompt_tokens_details.cached_tokens"), 8);
    json_decref(j);

    /* Bad input leaves the buffer alone. */
    size_t len = b.len;
    ifd_oai_meta_t bad = k_chat_meta;
    bad.id = NULL;
    ck_assert_int_eq(ifd_oai_response_json(&b, &bad, ch, 2, &u), IFD_EINVAL);
    ck_assert_uint_eq(b.len, len);
    ifd_buf_free(&b);
}
END_TEST

START_TEST(test_completion_response)
{
    ifd_oai_top_logprob_t top[2] = {{" the", 4, -0.5f}, {" a", 2, -1.0f}};
    ifd_oai_logprob_t lp[3] = {{" the", 4, -0.5f, top, 2, false},
                               {" caf\xc3\xa9", 6, -0.25f, top, 1, false},
                               {"!", 1, -3.0f, NULL, 0, false}};
    ifd_oai_choice_t ch = {.index = 0,
                           .text = " the caf\xc3\xa9!",
                           .text_len = 11,
                           .finish_reason = "length",
                           .has_logprobs = true,
                           .logprobs = lp,
                           .n_logprobs = 3,
                           .text_offset = 100};
    ifd_oai_usage_t u = {3, 3, 0};
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_oai_response_json(&b, &k_cmpl_meta, &ch, 1, &u), 0);
    json_t *j = load(b.data, b.len);
    ck_assert_str_eq(js(j, "object"), "text_completion");
    ck_assert_str_eq(js(j, "system_fingerprint"), "fp_inferd");
    ck_assert_str_eq(js(j, "choices.0.text"), " the caf\xc3\xa9!");
    ck_assert_ptr_null(jp(j, "choices.0.message"));
    ck_assert_str_eq(js(j, "choices.0.logprobs.tokens.1"), " caf\xc3\xa9");
    ck_assert(jnum(j, "choices.0.logprobs.token_logprobs.2") == -3.0);
    ck_assert(jnum(j, "choices.0.logprobs.top_logprobs.0. a") == -1.0);
    ck_assert(jnum(j, "choices.0.logprobs.top_logprobs.1. the") == -0.5);
    /* no alternatives (logprobs 0): the token's own, as vLLM writes it */
    ck_assert_uint_eq(json_object_size(jp(j, "choices.0.logprobs.top_logprobs.2")), 1);
    ck_assert(jnum(j, "choices.0.logprobs.top_logprobs.2.!") == -3.0);
    /* character offsets: " the" is 4, " café" is 5 characters (6 bytes) */
    ck_assert_int_eq(ji(j, "choices.0.logprobs.text_offset.0"), 100);
    ck_assert_int_eq(ji(j, "choices.0.logprobs.text_offset.1"), 104);
    ck_assert_int_eq(ji(j, "choices.0.logprobs.text_offset.2"), 109);
    ck_assert_int_eq(ji(j, "usage.prompt_tokens_details.cached_tokens"), 0);
    json_decref(j);

    /* The bare helpers. */
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_oai_usage_json(&b, &u), 0);
    ck_assert_str_eq(b.data, "{\"prompt_tokens\":3,\"completion_tokens\":3,\"total_tokens\":6,"
                             "\"prompt_tokens_details\":{\"cached_tokens\":0}}");
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_oai_logprobs_json(&b, IFD_OAI_CHAT, lp, 0, 0), 0);
    ck_assert_str_eq(b.data, "{\"content\":[],\"refusal\":null}");
    ifd_buf_free(&b);
}
END_TEST

START_TEST(test_prompt_logprobs)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    ck_assert_int_eq(parse_chat(&a, "{" MSG ",\"prompt_logprobs\":20}", &r, &e), 0);
    ck_assert(r.prompt_logprobs && r.prompt_top_logprobs == 20);
    ck_assert_int_eq(parse_cmpl(&a, "{\"prompt\":\"x\",\"prompt_logprobs\":0}", &r, &e), 0);
    ck_assert(r.prompt_logprobs && r.prompt_top_logprobs == 0);
    /* vLLM accepts 0 with stream (a stream carries none) */
    ck_assert_int_eq(
        parse_cmpl(&a, "{\"prompt\":\"x\",\"stream\":true,\"prompt_logprobs\":0}", &r, &e), 0);
    ck_assert(!r.prompt_logprobs);
    ck_assert_int_eq(parse_chat(&a, "{" MSG ",\"prompt_logprobs\":null}", &r, &e), 0);
    ck_assert(!r.prompt_logprobs);
    /* -1 (the vocabulary) and any count parse; the router caps them
     * (max_logprobs, daemon/gen.c); below -1 is refused */
    ck_assert_int_eq(parse_chat(&a, "{" MSG ",\"prompt_logprobs\":-1}", &r, &e), 0);
    ck_assert(r.prompt_logprobs && r.prompt_top_logprobs == IFD_OAI_LOGPROBS_VOCAB);
    ck_assert_int_eq(parse_chat(&a, "{" MSG ",\"prompt_logprobs\":1000}", &r, &e), 0);
    ck_assert(r.prompt_top_logprobs == 1000);
    ck_assert_int_eq(parse_chat(&a, "{" MSG ",\"logprobs\":true,\"top_logprobs\":-1}", &r, &e), 0);
    ck_assert(r.top_logprobs == IFD_OAI_LOGPROBS_VOCAB);
    ck_assert_int_eq(parse_cmpl(&a, "{\"prompt\":\"x\",\"logprobs\":50}", &r, &e), 0);
    ck_assert(r.logprobs && r.top_logprobs == 50);
    ck_assert_int_eq(parse_chat(&a, "{" MSG ",\"prompt_logprobs\":-2}", &r, &e), IFD_EINVAL);
    ck_assert_int_eq(
        parse_cmpl(&a, "{\"prompt\":\"x\",\"stream\":true,\"prompt_logprobs\":-1}", &r, &e),
        IFD_EINVAL);
    ifd_arena_close(&a);

    /* [null, {token first, then the alternatives}]: completions per choice */
    ifd_oai_plp_token_t alt[2] = {{7, "ab", 2, -0.5f, 1}, {9, "c\xff", 2, -1.5f, 2}};
    ifd_oai_prompt_logprob_t plp[2] = {{{9, "c\xff", 2, -1.5f, 2}, alt, 2},
                                       {{3, "z", 1, -INFINITY, 49000}, alt, 2}};
    ifd_oai_top_logprob_t top[1] = {{"ab", 2, -0.5f}};
    ifd_oai_logprob_t lp[3] = {{"q", 1, 0, NULL, 0, true},
                               {"c\xff", 2, -1.5f, top, 1, false},
                               {"z", 1, -9.0f, top, 1, false}};
    ifd_oai_choice_t ch = {.index = 0,
                           .text = "qcz",
                           .text_len = 3,
                           .finish_reason = "stop",
                           .has_logprobs = true,
                           .logprobs = lp,
                           .n_logprobs = 3,
                           .has_prompt_logprobs = true,
                           .prompt_logprobs = plp,
                           .n_prompt_logprobs = 2,
                           .prompt_top = 1};
    ifd_oai_usage_t u = {3, 1, 0};
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_oai_response_json(&b, &k_cmpl_meta, &ch, 1, &u), 0);
    json_t *j = load(b.data, b.len);
    ck_assert(jnull(j, "choices.0.prompt_logprobs.0"));
    ck_assert_int_eq(json_array_size(jp(j, "choices.0.prompt_logprobs")), 3);
    ck_assert_int_eq(json_object_size(jp(j, "choices.0.prompt_logprobs.1")), 2); /* 9, then 7 */
    ck_assert(jnum(j, "choices.0.prompt_logprobs.1.9.logprob") == -1.5);
    ck_assert_int_eq(ji(j, "choices.0.prompt_logprobs.1.9.rank"), 2);
    ck_assert_str_eq(js(j, "choices.0.prompt_logprobs.1.9.decoded_token"), "c\xef\xbf\xbd");
    ck_assert_int_eq(ji(j, "choices.0.prompt_logprobs.1.7.rank"), 1);
    ck_assert(jnum(j, "choices.0.prompt_logprobs.2.3.logprob") == -9999.0);
    ck_assert_int_eq(ji(j, "choices.0.prompt_logprobs.2.3.rank"), 49000);
    ck_assert_ptr_null(jp(j, "choices.0.prompt_logprobs.2.9")); /* prompt_top 1 */
    ck_assert_ptr_null(jp(j, "prompt_logprobs"));
    /* echo + logprobs: the first prompt token's logprob is null */
    ck_assert(jnull(j, "choices.0.logprobs.token_logprobs.0"));
    ck_assert(jnull(j, "choices.0.logprobs.top_logprobs.0"));
    ck_assert(jnum(j, "choices.0.logprobs.token_logprobs.1") == -1.5);
    ck_assert(jnum(j, "choices.0.logprobs.top_logprobs.2.ab") == -0.5);
    json_decref(j);
    /* chat: once, at the top level */
    ifd_buf_clear(&b);
    ch.has_logprobs = false;
    ck_assert_int_eq(ifd_oai_response_json(&b, &k_chat_meta, &ch, 1, &u), 0);
    j = load(b.data, b.len);
    ck_assert(jnull(j, "prompt_logprobs.0"));
    ck_assert(jnum(j, "prompt_logprobs.1.7.logprob") == -0.5);
    ck_assert_ptr_null(jp(j, "choices.0.prompt_logprobs"));
    json_decref(j);
    ifd_buf_free(&b);
}
END_TEST

/* Runs `out` through the SSE parser; returns the JSON chunks and counts [DONE]. */
static json_t *sse_chunks(const ifd_buf_t *out, int *done_last)
{
    ifd_sse_parser_t p;
    ifd_sse_parser_init(&p, 0);
    ck_assert_int_eq(ifd_sse_parser_feed(&p, out->data, out->len), 0);
    json_t *arr = json_array();
    ifd_sse_event_t ev;
    int rc;
    *done_last = 0;
    while ((rc = ifd_sse_parser_next(&p, &ev)) == 1) {
        ck_assert_msg(*done_last == 0, "an event after [DONE]");
        if (strcmp(ev.data, "[DONE]") == 0) {
            *done_last = 1;
            continue;
        }
        json_array_append_new(arr, load(ev.data, ev.len));
    }
    ck_assert_int_eq(rc, 0);
    ifd_sse_parser_close(&p);
    return arr;
}

START_TEST(test_chat_stream)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_stream_t s;
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_oai_stream_init(&s, &a, &k_chat_meta, 2, true), 0);
    ck_assert_int_eq(ifd_oai_stream_start(&s, &b), 0);
    ifd_oai_logprob_t lp = {"Hel", 3, -0.5f, NULL, 0, false};
    ifd_oai_choice_t c = {.index = 0,
                          .text = "Hel",
                          .text_len = 3,
                          .has_logprobs = true,
                          .logprobs = &lp,
                          .n_logprobs = 1};
    ck_assert_int_eq(ifd_oai_stream_delta(&s, &b, &c), 0);
    c = (ifd_oai_choice_t){.index = 1, .text = "Yo", .text_len = 2};
    ck_assert_int_eq(ifd_oai_stream_delta(&s, &b, &c), 0);
    size_t before = b.len;
    c = (ifd_oai_choice_t){.index = 1, .text = NULL, .text_len = 0};
    ck_assert_int_eq(ifd_oai_stream_delta(&s, &b, &c), 0); /* nothing to send */
    ck_assert_uint_eq(b.len, before);
    c = (ifd_oai_choice_t){.index = 0, .text = "lo", .text_len = 2, .finish_reason = "stop"};
    ck_assert_int_eq(ifd_oai_stream_finish(&s, &b, &c), 0);
    /* Nothing may follow a finished choice; the stream cannot end early. */
    c = (ifd_oai_choice_t){.index = 0, .text = "x", .text_len = 1};
    ck_assert_int_eq(ifd_oai_stream_delta(&s, &b, &c), IFD_EINVAL);
    c.finish_reason = "stop";
    ck_assert_int_eq(ifd_oai_stream_finish(&s, &b, &c), IFD_EINVAL);
    size_t mark = b.len;
    ifd_oai_usage_t u = {7, 3, 4};
    ck_assert_int_eq(ifd_oai_stream_end(&s, &b, &u), IFD_EINVAL);
    c = (ifd_oai_choice_t){.index = 1, .text = "!", .text_len = 1, .finish_reason = "length"};
    ck_assert_int_eq(ifd_oai_stream_delta(&s, &b, &c), IFD_EINVAL); /* reason in a delta */
    c.index = 2;
    ck_assert_int_eq(ifd_oai_stream_finish(&s, &b, &c), IFD_EINVAL); /* no such choice */
    c.index = 1;
    c.finish_reason = NULL;
    ck_assert_int_eq(ifd_oai_stream_finish(&s, &b, &c), IFD_EINVAL); /* reason missing */
    ck_assert_int_eq(ifd_oai_stream_end(&s, &b, NULL), IFD_EINVAL);
    ck_assert_uint_eq(b.len, mark); /* refusals write nothing */
    c.finish_reason = "length";
    ck_assert_int_eq(ifd_oai_stream_finish(&s, &b, &c), 0);
    ck_assert_int_eq(ifd_oai_stream_end(&s, &b, &u), 0);
    ck_assert_int_eq(ifd_oai_stream_end(&s, &b, &u), IFD_EINVAL);

    int done = 0;
    json_t *chunks = sse_chunks(&b, &done);
    ck_assert_int_eq(done, 1);
    size_t n = json_array_size(chunks);
    ck_assert_uint_eq(n, 7); /* 2 role chunks, 2 deltas, 2 finishes, usage */
    char acc[2][32] = {"", ""};
    int role_seen[2] = {0, 0}, finished[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        json_t *ch = json_array_get(chunks, i);
        ck_assert_str_eq(js(ch, "id"), "chatcmpl-abc");
        ck_assert_int_eq(ji(ch, "created"), 1700000000);
        ck_assert_str_eq(js(ch, "object"), "chat.completion.chunk");
        ck_assert_str_eq(js(ch, "model"), "smol");
        json_t *choices = jp(ch, "choices");
        ck_assert(json_is_array(choices));
        if (i == n - 1) {
            /* the usage chunk */
            ck_assert_uint_eq(json_array_size(choices), 0);
            ck_assert_int_eq(ji(ch, "usage.prompt_tokens"), 7);
            ck_assert_int_eq(ji(ch, "usage.completion_tokens"), 3);
            ck_assert_int_eq(ji(ch, "usage.total_tokens"), 10);
            ck_assert_int_eq(ji(ch, "usage.prompt_tokens_details.cached_tokens"), 4);
            continue;
        }
        ck_assert(jnull(ch, "usage"));
        ck_assert_uint_eq(json_array_size(choices), 1);
        int idx = (int)ji(ch, "choices.0.index");
        ck_assert(idx == 0 || idx == 1);
        ck_assert_msg(!finished[idx], "chunk %zu after choice %d finished", i, idx);
        json_t *role = jp(ch, "choices.0.delta.role");
        if (role) {
            ck_assert_msg(!role_seen[idx], "role twice");
            ck_assert_str_eq(json_string_value(role), "assistant");
        } else {
            ck_assert_msg(role_seen[idx], "first delta of %d lacks the role", idx);
        }
        role_seen[idx] = 1;
        json_t *content = jp(ch, "choices.0.delta.content");
        if (content)
            strcat(acc[idx], json_string_value(content));
        if (!jnull(ch, "choices.0.finish_reason"))
            finished[idx] = 1;
    }
    ck_assert(finished[0] && finished[1]);
    ck_assert_str_eq(acc[0], "Hello");
    ck_assert_str_eq(acc[1], "Yo!");
    /* The first delta of choice 0 carries its logprobs; the others have null. */
    ck_assert_str_eq(js(chunks, "2.choices.0.logprobs.content.0.token"), "Hel");
    ck_assert(jnull(chunks, "3.choices.0.logprobs"));
    ck_assert_str_eq(js(chunks, "4.choices.0.finish_reason"), "stop");
    ck_assert_str_eq(js(chunks, "5.choices.0.finish_reason"), "length");
    json_decref(chunks);
    ifd_buf_free(&b);
    ifd_arena_close(&a);
}
END_TEST

START_TEST(test_chat_stream_no_start_no_usage)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_stream_t s;
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_oai_stream_init(&s, &a, &k_chat_meta, 2, false), 0);
    ifd_oai_choice_t c = {.index = 0, .text = "A", .text_len = 1};
    ck_assert_int_eq(ifd_oai_stream_delta(&s, &b, &c), 0);
    /* Choice 1 produces nothing at all: its only chunk has role, "" and the reason. */
    c = (ifd_oai_choice_t){.index = 1, .finish_reason = "stop"};
    ck_assert_int_eq(ifd_oai_stream_finish(&s, &b, &c), 0);
    c = (ifd_oai_choice_t){.index = 0, .finish_reason = "stop"};
    ck_assert_int_eq(ifd_oai_stream_finish(&s, &b, &c), 0);
    ck_assert_int_eq(ifd_oai_stream_end(&s, &b, NULL), 0);
    int done;
    json_t *ch = sse_chunks(&b, &done);
    ck_assert_int_eq(done, 1);
    ck_assert_uint_eq(json_array_size(ch), 3);
    ck_assert_str_eq(js(ch, "0.choices.0.delta.role"), "assistant");
    ck_assert_str_eq(js(ch, "0.choices.0.delta.content"), "A");
    ck_assert_str_eq(js(ch, "1.choices.0.delta.role"), "assistant");
    ck_assert_str_eq(js(ch, "1.choices.0.delta.content"), "");
    ck_assert_str_eq(js(ch, "1.choices.0.finish_reason"), "stop");
    /* The last content chunk with nothing left: delta {} (as OpenAI sends). */
    ck_assert_uint_eq(json_object_size(jp(ch, "2.choices.0.delta")), 0);
    ck_assert_str_eq(js(ch, "2.choices.0.finish_reason"), "stop");
    for (size_t i = 0; i < 3; i++)
        ck_assert_ptr_null(jp(json_array_get(ch, i), "usage")); /* no usage key at all */
    json_decref(ch);
    ifd_buf_free(&b);
    ifd_arena_close(&a);
}
END_TEST

START_TEST(test_completion_stream)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_stream_t s;
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_oai_stream_init(&s, &a, &k_cmpl_meta, 1, true), 0);
    ck_assert_int_eq(ifd_oai_stream_start(&s, &b), 0);
    ck_assert_uint_eq(b.len, 0); /* completions have no role chunk */
    ifd_oai_logprob_t lp1 = {"caf\xc3\xa9", 5, -0.5f, NULL, 0, false};
    ifd_oai_logprob_t lp2 = {" au", 3, -1.5f, NULL, 0, false};
    ifd_oai_choice_t c = {.index = 0,
                          .text = "caf\xc3\xa9",
                          .text_len = 5,
                          .has_logprobs = true,
                          .logprobs = &lp1,
                          .n_logprobs = 1};
    ck_assert_int_eq(ifd_oai_stream_delta(&s, &b, &c), 0);
    c = (ifd_oai_choice_t){.index = 0,
                           .text = " au",
                           .text_len = 3,
                           .finish_reason = "length",
                           .has_logprobs = true,
                           .logprobs = &lp2,
                           .n_logprobs = 1};
    ck_assert_int_eq(ifd_oai_stream_finish(&s, &b, &c), 0);
    ifd_oai_usage_t u = {2, 2, 0};
    ck_assert_int_eq(ifd_oai_stream_end(&s, &b, &u), 0);
    ck_assert(strcmp(b.data + b.len - 14, "data: [DONE]\n\n") == 0);
    int done;
    json_t *ch = sse_chunks(&b, &done);
    ck_assert_uint_eq(json_array_size(ch), 3);
    ck_assert_str_eq(js(ch, "0.object"), "text_completion");
    ck_assert_str_eq(js(ch, "0.id"), "cmpl-xyz");
    ck_assert_str_eq(js(ch, "0.system_fingerprint"), "fp_inferd");
    ck_assert_str_eq(js(ch, "0.choices.0.text"), "caf\xc3\xa9");
    ck_assert(jnull(ch, "0.choices.0.finish_reason"));
    ck_assert(jnull(ch, "0.usage"));
    ck_assert_int_eq(ji(ch, "0.choices.0.logprobs.text_offset.0"), 0);
    ck_assert_int_eq(ji(ch, "1.choices.0.logprobs.text_offset.0"), 4); /* "café": 4 chars */
    ck_assert_str_eq(js(ch, "1.choices.0.text"), " au");
    ck_assert_str_eq(js(ch, "1.choices.0.finish_reason"), "length");
    ck_assert_uint_eq(json_array_size(jp(ch, "2.choices")), 0);
    ck_assert_int_eq(ji(ch, "2.usage.total_tokens"), 4);
    json_decref(ch);

    /* Bad set-ups. */
    ck_assert_int_eq(ifd_oai_stream_init(&s, &a, &k_cmpl_meta, 0, false), IFD_EINVAL);
    ck_assert_int_eq(ifd_oai_stream_delta(&s, &b, &c), IFD_EINVAL);
    ifd_buf_free(&b);
    ifd_arena_close(&a);
}
END_TEST

START_TEST(test_models_tokenize_ids)
{
    ifd_buf_t b = IFD_BUF_INIT;
    ifd_oai_model_t m[2] = {
        {"smol", 1700000000, NULL, "/models/smol.gguf", 8192, "llama", "gguf"},
        {"other", 5, "me", NULL, 0, NULL, NULL}};
    ck_assert_int_eq(ifd_oai_models_json(&b, m, 2), 0);
    json_t *j = load(b.data, b.len);
    ck_assert_str_eq(js(j, "object"), "list");
    ck_assert_str_eq(js(j, "data.0.id"), "smol");
    ck_assert_str_eq(js(j, "data.0.object"), "model");
    ck_assert_int_eq(ji(j, "data.0.created"), 1700000000);
    ck_assert_str_eq(js(j, "data.0.owned_by"), "inferd");
    ck_assert_str_eq(js(j, "data.0.root"), "/models/smol.gguf");
    ck_assert(jnull(j, "data.0.parent"));
    ck_assert_int_eq(ji(j, "data.0.max_model_len"), 8192);
    ck_assert_str_eq(js(j, "data.1.owned_by"), "me");
    ck_assert_str_eq(js(j, "data.1.root"), "other");
    ck_assert_ptr_null(jp(j, "data.1.max_model_len"));
    ck_assert_str_eq(js(j, "data.0.architecture"), "llama");
    ck_assert_str_eq(js(j, "data.0.format"), "gguf");
    ck_assert_ptr_null(jp(j, "data.1.architecture"));
    ck_assert_ptr_null(jp(j, "data.1.format"));
    json_decref(j);

    /* GET /v1/models/{id}: the same object, alone. */
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_oai_model_json(&b, &m[0]), 0);
    j = load(b.data, b.len);
    ck_assert_str_eq(js(j, "id"), "smol");
    ck_assert_str_eq(js(j, "object"), "model");
    ck_assert_int_eq(ji(j, "max_model_len"), 8192);
    json_decref(j);
    ifd_oai_model_t noid = {NULL, 0, NULL, NULL, 0, NULL, NULL};
    ck_assert_int_eq(ifd_oai_model_json(&b, &noid), IFD_EINVAL);

    ifd_buf_clear(&b);
    const int32_t toks[3] = {1, 2, 49151};
    ifd_oai_bytes_t strs[3] = {{"a", 1}, {"\xc3", 1}, {"", 0}};
    ck_assert_int_eq(ifd_oai_tokenize_json(&b, toks, 3, 2048, strs), 0);
    j = load(b.data, b.len);
    ck_assert_int_eq(ji(j, "count"), 3);
    ck_assert_int_eq(ji(j, "max_model_len"), 2048);
    ck_assert_int_eq(ji(j, "tokens.2"), 49151);
    ck_assert_str_eq(js(j, "token_strs.1"), "\xef\xbf\xbd");
    json_decref(j);
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_oai_tokenize_json(&b, NULL, 0, 2048, NULL), 0);
    ck_assert_str_eq(b.data, "{\"count\":0,\"max_model_len\":2048,\"tokens\":[],"
                             "\"token_strs\":null}");
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_oai_detokenize_json(&b, "hi \"you\"\n", 9), 0);
    ck_assert_str_eq(b.data, "{\"prompt\":\"hi \\\"you\\\"\\n\"}");
    ifd_buf_free(&b);

    char id[IFD_OAI_ID_MAX];
    ifd_oai_make_id(id, IFD_OAI_CHAT, 0x0123456789abcdefull, 1);
    ck_assert_str_eq(id, "chatcmpl-0123456789abcdef0000000000000001");
    ifd_oai_make_id(id, IFD_OAI_COMPLETION, 0, UINT64_MAX);
    ck_assert_str_eq(id, "cmpl-0000000000000000ffffffffffffffff");
}
END_TEST

/* Mutated request bodies: every parse ends in 0 or a clean 400. */
START_TEST(test_fuzz_requests)
{
    static const char *seeds[] = {
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
        "\"text\",\"text\":\"hi\"}]}],\"stop\":[\"a\",\"b\"],\"logit_bias\":{\"5\":1},"
        "\"n\":2,\"logprobs\":true,\"top_logprobs\":3,\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true},\"seed\":7,\"temperature\":0.5}",
        "{\"prompt\":[[1,2,3],[4]],\"max_tokens\":5,\"logprobs\":2,\"echo\":false,"
        "\"best_of\":1,\"stop_token_ids\":[1]}",
        "{\"prompt\":\"x\",\"add_special_tokens\":true}",
        "{\"tokens\":[1,2,3]}",
    };
    static const char alphabet[] = "{}[]\":,0123456789-.eE \\tnulrfasx";
    const char *env = getenv("INFERD_FUZZ_ITERS");
    long iters = env ? atol(env) : 3000;
    uint64_t st = 0x2545f4914f6cdd1dull;
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    size_t ok = 0, refused = 0;
    for (int ep = 0; ep < 4; ep++) {
        const char *seed = seeds[ep];
        size_t sl = strlen(seed);
        for (long it = 0; it < iters; it++) {
            char buf[512];
            size_t n = sl;
            memcpy(buf, seed, n);
            int edits = 1 + (int)(st % 3);
            for (int k = 0; k < edits; k++) {
                st ^= st << 13, st ^= st >> 7, st ^= st << 17;
                if (n == 0)
                    break;
                size_t at = (size_t)(st >> 16) % n;
                switch (st % 4) {
                case 0:
                    buf[at] = alphabet[(st >> 40) % (sizeof(alphabet) - 1)];
                    break;
                case 1:
                    memmove(buf + at, buf + at + 1, n - at - 1);
                    n--;
                    break;
                case 2:
                    if (n < sizeof(buf) - 1) {
                        memmove(buf + at + 1, buf + at, n - at);
                        buf[at] = alphabet[(st >> 40) % (sizeof(alphabet) - 1)];
                        n++;
                    }
                    break;
                default:
                    n = at + 1;
                    break;
                }
            }
            /* Exact-size, not NUL-terminated: parsers must respect len. */
            char *body = malloc(n ? n : 1);
            memcpy(body, buf, n);
            ifd_oai_error_t e;
            memset(&e, 0, sizeof(e));
            int rc = parse_any(&a, ep, body, n, &e);
            if (rc == 0) {
                ok++;
            } else {
                ck_assert_int_eq(rc, IFD_EINVAL);
                ck_assert_int_eq(e.status, 400);
                ck_assert(e.message[0] != '\0');
                refused++;
            }
            free(body);
            ifd_arena_reset(&a);
        }
    }
    ck_assert_uint_gt(ok, 0);
    ck_assert_uint_gt(refused, 0);
    ifd_arena_close(&a);
}
END_TEST

/* ---- structured outputs and tools ------------------------------------------------------ */

#define TOOL_F                                                                                     \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\","         \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"         \
    "\"required\":[\"city\"]}}}"

START_TEST(test_structured_and_tools)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    static const char *const with_grammar[] = {
        "{" MSG ",\"response_format\":{\"type\":\"json_object\"}}",
        "{" MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
        "\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
        "\"integer\"}}}}}}",
        "{" MSG ",\"structured_outputs\":{\"json\":{\"type\":\"string\"}}}",
        "{" MSG ",\"structured_outputs\":{\"regex\":\"[a-z]+\",\"backend\":\"xgrammar\"}}",
        "{" MSG ",\"structured_outputs\":{\"choice\":[\"a\",\"b\"]}}",
        "{" MSG ",\"structured_outputs\":{\"grammar\":\"root ::= \\\"x\\\"\"}}",
        "{" MSG ",\"structured_outputs\":{\"json_object\":true}}",
        "{" MSG ",\"guided_json\":\"{\\\"type\\\":\\\"integer\\\"}\"}",
        "{" MSG ",\"guided_regex\":\"\\\\d{3}\",\"guided_decoding_backend\":\"outlines\"}",
        "{" MSG ",\"guided_choice\":[\"yes\",\"no\"]}",
        "{" MSG ",\"guided_grammar\":\"root ::= [0-9]+\"}",
        "{" MSG ",\"tools\":[" TOOL_F "],\"tool_choice\":\"required\"}",
        "{" MSG ",\"tools\":[" TOOL_F "],\"tool_choice\":{\"type\":\"function\",\"function\":"
        "{\"name\":\"get_weather\"}}}",
    };
    for (size_t i = 0; i < sizeof with_grammar / sizeof with_grammar[0]; i++) {
        int rc = parse_chat(&a, with_grammar[i], &r, &e);
        ck_assert_msg(rc == 0, "%s: %s (%s)", with_grammar[i], e.message, e.param);
        ck_assert_msg(r.grammar && r.grammar_len == strlen(r.grammar), "%s", with_grammar[i]);
    }
    /* completions take the same sources */
    ck_assert_int_eq(parse_cmpl(&a, "{\"prompt\":\"x\",\"guided_choice\":[\"a\"]}", &r, &e), 0);
    ck_assert_ptr_nonnull(r.grammar);
    /* text, no tools: no grammar */
    ck_assert_int_eq(parse_chat(&a, "{" MSG ",\"response_format\":{\"type\":\"text\"}}", &r, &e),
                     0);
    ck_assert_ptr_null(r.grammar);

    /* tools: auto by default, kept as JSON for templates */
    ck_assert_int_eq(
        parse_chat(&a,
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},"
                   "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
                   "\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                   "\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}}]},"
                   "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"5C\"}],"
                   "\"tools\":[" TOOL_F "],\"parallel_tool_calls\":false,"
                   "\"priority\":-2,\"include_stop_str_in_output\":true,"
                   "\"truncate_prompt_tokens\":100}",
                   &r, &e),
        0);
    ck_assert_int_eq(r.tool_choice, IFD_OAI_TOOL_CHOICE_AUTO);
    ck_assert_ptr_null(r.grammar);
    ck_assert_uint_eq(r.n_tools, 1);
    ck_assert_str_eq(r.tools[0].name, "get_weather");
    ck_assert_str_eq(r.tools[0].description, "d");
    ck_assert(strstr(r.tools[0].parameters, "\"city\""));
    ck_assert(strstr(r.tools_json, "get_weather"));
    ck_assert(strstr(r.messages_json, "tool_call_id"));
    ck_assert(strstr(r.messages[1].tool_calls, "Oslo"));
    ck_assert_str_eq(r.messages[2].tool_call_id, "c1");
    ck_assert(!r.parallel_tool_calls);
    ck_assert_int_eq(r.priority, -2);
    ck_assert(r.include_stop_str);
    ck_assert_int_eq(r.truncate_prompt_tokens, 100);
    ck_assert_int_eq(
        parse_chat(&a, "{" MSG ",\"tools\":[" TOOL_F "],\"tool_choice\":\"none\"}", &r, &e), 0);
    ck_assert_int_eq(r.tool_choice, IFD_OAI_TOOL_CHOICE_NONE);
    /* a tool only shown to the model (auto, not strict) never fails the request over a
     * keyword no grammar enforces; the same tool named by tool_choice, or strict, does
     * (test_invalid_requests) */
    static const char unenforced[] =
        "{\"type\":\"function\",\"function\":{\"name\":\"tag\",\"parameters\":{\"type\":"
        "\"object\",\"properties\":{\"t\":{\"type\":\"array\",\"uniqueItems\":true},"
        "\"n\":{\"not\":{\"type\":\"null\"}}}}}}";
    char body[1024];
    snprintf(body, sizeof body, "{" MSG ",\"tools\":[" TOOL_F ",%s]}", unenforced);
    ck_assert_int_eq(parse_chat(&a, body, &r, &e), 0);
    ck_assert_uint_eq(r.n_tools, 2);
    ck_assert(!r.tools[1].strict);
    /* another tool forced: the unenforced one is still only shown */
    snprintf(body, sizeof body,
             "{" MSG ",\"tools\":[" TOOL_F ",%s],\"tool_choice\":{\"type\":\"function\","
             "\"function\":{\"name\":\"get_weather\"}}}",
             unenforced);
    ck_assert_int_eq(parse_chat(&a, body, &r, &e), 0);
    ck_assert_ptr_nonnull(r.grammar);
    /* strict with an enforceable schema: accepted */
    ck_assert_int_eq(
        parse_chat(&a,
                   "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                   "\"strict\":true,\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":"
                   "{\"type\":\"integer\",\"minimum\":0}},\"required\":[\"x\"]}}}]}",
                   &r, &e),
        0);
    ck_assert(r.tools[0].strict);
    /* a response_format schema a grammar enforces whole: no check at the end; one it
     * over-approximates (uniqueItems, if/then): accepted, its output checked (so_check);
     * the same keyword in a strict or forced tool too (its calls' arguments are checked) */
    ck_assert_int_eq(parse_chat(&a, with_grammar[1], &r, &e), 0);
    ck_assert(!r.so_check);
    ck_assert_int_eq(
        parse_chat(&a,
                   "{" MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
                   "\"name\":\"x\",\"schema\":{\"type\":\"array\",\"uniqueItems\":true,"
                   "\"if\":{\"minItems\":2},\"then\":{\"maxItems\":3}}}}}",
                   &r, &e),
        0);
    ck_assert(r.so_check && r.grammar);
    ck_assert_msg(
        parse_chat(&a,
                   "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                   "\"strict\":true,\"parameters\":{\"type\":\"array\",\"uniqueItems\":true}}},"
                   "{\"type\":\"function\",\"function\":{\"name\":\"g\",\"parameters\":{}}}]}",
                   &r, &e) == 0,
        "%s", e.message);
    ck_assert_msg(ifd_oai_tool_enforced(&r, 0) && !ifd_oai_tool_enforced(&r, 1), "%s", e.message);
    ck_assert_int_eq(
        parse_chat(&a,
                   "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                   "\"parameters\":{\"type\":\"object\",\"properties\":{\"t\":{\"type\":"
                   "\"array\",\"uniqueItems\":true}}}}}],\"tool_choice\":\"required\"}",
                   &r, &e),
        0);
    ck_assert(r.grammar && ifd_oai_tool_enforced(&r, 0));
    ifd_arena_close(&a);
}
END_TEST

START_TEST(test_toolcall_parse)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    ck_assert_int_eq(parse_chat(&a,
                                "{" MSG ",\"tools\":[" TOOL_F
                                ",{\"type\":\"function\",\"function\":"
                                "{\"name\":\"noop\"}}]}",
                                &r, &e),
                     0);
    static const struct {
        const char *text;
        size_t n_calls;
        const char *content; /* the content part */
        const char *args0;
    } cases[] = {
        {"Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
         "\"Oslo\"}}\n</tool_call>",
         1, "Let me check.", "{\"city\":\"Oslo\"}"},
        {"<tool_call>{\"name\":\"noop\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":"
         "\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"X\\\"}\"}</tool_call>",
         2, "", "{}"},
        {"<tool_call>{\"name\":\"noop\",\"arguments\":{}}", 1, "", "{}"}, /* unclosed at the end */
        {"[TOOL_CALLS][{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Rome\"}}]", 1, "",
         "{\"city\":\"Rome\"}"},
        {"[TOOL_CALLS]get_weather[ARGS]{\"city\":\"Rome\"}", 1, "", "{\"city\":\"Rome\"}"},
        {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\"}}", 1, "",
         "{\"city\":\"Lima\"}"},
        {"<|python_tag|>{\"name\": \"noop\", \"parameters\": {}}; {\"name\": \"noop\", "
         "\"parameters\": {}}",
         2, "", "{}"},
        /* not calls: unknown function, bad JSON, plain text */
        {"<tool_call>{\"name\":\"rm_rf\",\"arguments\":{}}</tool_call>", 0, NULL, NULL},
        {"<tool_call>{\"name\":\"noop\",</tool_call>", 0, NULL, NULL},
        {"The weather is fine.", 0, NULL, NULL},
        {"{\"city\": \"Oslo\"}", 0, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ifd_toolcall_result_t t;
        size_t len = strlen(cases[i].text);
        ck_assert_int_eq(ifd_toolcall_parse(&a, cases[i].text, len, &r, &t), 0);
        ck_assert_msg(t.n_calls == cases[i].n_calls, "case %zu: %zu calls", i, t.n_calls);
        if (!t.n_calls) {
            ck_assert_uint_eq(t.content_len, len);
            continue;
        }
        ck_assert_uint_eq(t.content_len, strlen(cases[i].content));
        ck_assert(memcmp(cases[i].text, cases[i].content, t.content_len) == 0);
        ck_assert_str_eq(t.calls[0].arguments, cases[i].args0);
    }
    /* parallel_tool_calls false: auto mode keeps the first call, in every format */
    ck_assert_int_eq(parse_chat(&a,
                                "{" MSG ",\"parallel_tool_calls\":false,\"tools\":[" TOOL_F
                                ",{\"type\":\"function\",\"function\":"
                                "{\"name\":\"noop\"}}]}",
                                &r, &e),
                     0);
    ck_assert(!r.parallel_tool_calls);
    static const char *const several[] = {
        "Sure.\n<tool_call>{\"name\":\"noop\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":"
        "\"get_weather\",\"arguments\":{\"city\":\"X\"}}</tool_call>",
        "[TOOL_CALLS][{\"name\":\"noop\",\"arguments\":{}},{\"name\":\"get_weather\","
        "\"arguments\":{\"city\":\"X\"}}]",
        "<|python_tag|>{\"name\": \"noop\", \"parameters\": {}}; {\"name\": \"get_weather\", "
        "\"parameters\": {\"city\": \"X\"}}",
    };
    for (size_t i = 0; i < sizeof several / sizeof several[0]; i++) {
        ifd_toolcall_result_t t;
        size_t len = strlen(several[i]);
        ck_assert_int_eq(ifd_toolcall_parse(&a, several[i], len, &r, &t), 0);
        ck_assert_msg(t.n_calls == 1, "several[%zu]: %zu calls", i, t.n_calls);
        ck_assert_str_eq(t.calls[0].name, "noop");
        ck_assert_str_eq(t.calls[0].arguments, "{}");
        ck_assert_uint_eq(t.content_len, i == 0 ? strlen("Sure.") : 0);
    }
    /* forced: required (the grammar's array) and named (the arguments) */
    ck_assert_int_eq(
        parse_chat(&a, "{" MSG ",\"tools\":[" TOOL_F "],\"tool_choice\":\"required\"}", &r, &e), 0);
    ifd_toolcall_result_t t;
    const char *req = "[{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Bern\"}}]";
    ck_assert_int_eq(ifd_toolcall_parse(&a, req, strlen(req), &r, &t), 0);
    ck_assert_uint_eq(t.n_calls, 1);
    ck_assert_str_eq(t.calls[0].name, "get_weather");
    ck_assert_str_eq(t.calls[0].arguments, "{\"city\":\"Bern\"}");
    ck_assert_int_eq(parse_chat(&a,
                                "{" MSG ",\"tools\":[" TOOL_F "],\"tool_choice\":{\"type\":"
                                "\"function\",\"function\":{\"name\":\"get_weather\"}}}",
                                &r, &e),
                     0);
    const char *named = "{\"city\": \"Bern\"}";
    ck_assert_int_eq(ifd_toolcall_parse(&a, named, strlen(named), &r, &t), 0);
    ck_assert_uint_eq(t.n_calls, 1);
    ck_assert_str_eq(t.calls[0].arguments, "{\"city\":\"Bern\"}");

    /* hold-back for streaming */
    ck_assert_uint_eq(ifd_toolcall_hold_from("Hello", 5), 5);
    ck_assert_uint_eq(ifd_toolcall_hold_from("Hello <tool", 11), 6);
    ck_assert_uint_eq(ifd_toolcall_hold_from("Hi [TOOL_CALLS]x", 16), 3);
    ck_assert_uint_eq(ifd_toolcall_hold_from("  {\"na", 6), 0);
    ifd_arena_close(&a);
}
END_TEST

START_TEST(test_tool_call_response)
{
    ifd_oai_meta_t m = {IFD_OAI_CHAT, "chatcmpl-x", "smol", 1, NULL, NULL};
    ifd_oai_tool_call_t tc[2] = {{"call_1", "f", "{\"a\":1}"}, {"call_2", "g", "{}"}};
    ifd_oai_choice_t c = {0};
    c.finish_reason = "tool_calls";
    c.tool_calls = tc;
    c.n_tool_calls = 2;
    ifd_oai_usage_t u = {3, 4, 0};
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_oai_response_json(&b, &m, &c, 1, &u), 0);
    json_t *j = load(b.data, b.len);
    ck_assert(jnull(j, "choices.0.message.content"));
    ck_assert_str_eq(js(j, "choices.0.message.tool_calls.1.id"), "call_2");
    ck_assert_str_eq(js(j, "choices.0.message.tool_calls.0.type"), "function");
    ck_assert_str_eq(js(j, "choices.0.message.tool_calls.0.function.name"), "f");
    ck_assert_str_eq(js(j, "choices.0.message.tool_calls.0.function.arguments"), "{\"a\":1}");
    ck_assert_str_eq(js(j, "choices.0.finish_reason"), "tool_calls");
    json_decref(j);
    ifd_buf_free(&b);

    /* streamed: per call a header delta then an arguments delta */
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_stream_t s;
    ck_assert_int_eq(ifd_oai_stream_init(&s, &a, &m, 1, false), 0);
    ifd_oai_choice_t d = {0};
    d.tool_calls = tc;
    d.n_tool_calls = 2;
    ck_assert_int_eq(ifd_oai_stream_tool_calls(&s, &b, &d), 0);
    ifd_oai_choice_t f = {0};
    f.finish_reason = "tool_calls";
    ck_assert_int_eq(ifd_oai_stream_finish(&s, &b, &f), 0);
    /* split the events */
    char *p = b.data;
    int events = 0;
    while ((p = strstr(p, "data: "))) {
        p += 6;
        char *end = strstr(p, "\n\n");
        json_t *ev = load(p, (size_t)(end - p));
        if (events == 0) {
            ck_assert_str_eq(js(ev, "choices.0.delta.role"), "assistant");
            ck_assert_str_eq(js(ev, "choices.0.delta.tool_calls.0.id"), "call_1");
            ck_assert_str_eq(js(ev, "choices.0.delta.tool_calls.0.function.name"), "f");
            ck_assert_str_eq(js(ev, "choices.0.delta.tool_calls.0.function.arguments"), "");
        } else if (events == 1) {
            ck_assert_int_eq(ji(ev, "choices.0.delta.tool_calls.0.index"), 0);
            ck_assert_ptr_null(jp(ev, "choices.0.delta.tool_calls.0.id"));
            ck_assert_str_eq(js(ev, "choices.0.delta.tool_calls.0.function.arguments"),
                             "{\"a\":1}");
        } else if (events == 2) {
            ck_assert_int_eq(ji(ev, "choices.0.delta.tool_calls.0.index"), 1);
            ck_assert_str_eq(js(ev, "choices.0.delta.tool_calls.0.id"), "call_2");
        } else if (events == 4) {
            ck_assert_str_eq(js(ev, "choices.0.finish_reason"), "tool_calls");
        }
        json_decref(ev);
        events++;
        p = end;
    }
    ck_assert_int_eq(events, 5);
    ifd_buf_free(&b);
    ifd_arena_close(&a);
}
END_TEST


/* ---- /v1/responses (proto/responses.h) --------------------------------------------------- */

START_TEST(test_responses_parse)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    const char *body =
        "{\"model\":\"smol\",\"instructions\":\"Be brief.\",\"max_output_tokens\":33,"
        "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":7,\"store\":true,\"metadata\":{\"k\":\"v\"},"
        "\"include\":[\"message.output_text.logprobs\"],\"top_logprobs\":2,"
        "\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},"
        "{\"type\":\"input_text\",\"text\":\"b\"}]},"
        "{\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"add\","
        "\"arguments\":\"{\\\"x\\\":1}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"2\"},"
        "{\"type\":\"message\",\"role\":\"developer\",\"content\":\"more\"}],"
        "\"tools\":[{\"type\":\"function\",\"name\":\"add\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"x\":{\"type\":\"integer\"}},\"required\":[\"x\"]}}],"
        "\"tool_choice\":{\"type\":\"function\",\"name\":\"add\"}}";
    ck_assert_int_eq(built(ifd_responses_parse(&a, body, strlen(body), &r, &e), &a, &r, &e), 0);
    ck_assert_int_eq(r.kind, IFD_OAI_CHAT);
    ck_assert_uint_eq(r.n_messages, 5);
    ck_assert_str_eq(r.messages[0].role, "system");
    ck_assert_str_eq(r.messages[0].content, "Be brief.");
    ck_assert_str_eq(r.messages[1].role, "user");
    ck_assert_str_eq(r.messages[1].content, "a\nb");
    ck_assert_str_eq(r.messages[2].role, "assistant");
    ck_assert_ptr_nonnull(r.messages[2].tool_calls);
    ck_assert_ptr_nonnull(strstr(r.messages[2].tool_calls, "\"add\""));
    ck_assert_str_eq(r.messages[3].role, "tool");
    ck_assert_str_eq(r.messages[3].tool_call_id, "call_1");
    ck_assert_str_eq(r.messages[3].content, "2");
    ck_assert_str_eq(r.messages[4].role, "developer");
    ck_assert_int_eq(r.max_tokens, 33);
    ck_assert(fabsf(r.temperature - 0.5f) < 1e-6f && fabsf(r.top_p - 0.9f) < 1e-6f);
    ck_assert_int_eq(r.top_k, 7); /* vLLM extras pass through */
    ck_assert(r.logprobs);
    ck_assert_uint_eq(r.top_logprobs, 2);
    ck_assert_uint_eq(r.n_tools, 1);
    ck_assert_str_eq(r.tools[0].name, "add");
    ck_assert_int_eq(r.tool_choice, IFD_OAI_TOOL_CHOICE_NAMED);
    ck_assert_ptr_nonnull(r.grammar); /* the named call is forced */
    json_t *echo = load(r.responses_echo, strlen(r.responses_echo));
    ck_assert(json_is_false(jp(echo, "store"))); /* no server-side state */
    ck_assert_str_eq(js(echo, "instructions"), "Be brief.");
    ck_assert_int_eq(ji(echo, "max_output_tokens"), 33);
    ck_assert_str_eq(js(echo, "metadata.k"), "v");
    ck_assert_str_eq(js(echo, "tools.0.name"), "add");
    json_decref(echo);

    /* a string input; text.format json_schema → a grammar */
    body = "{\"input\":\"hi\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"s\","
           "\"schema\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}}}}}}";
    ck_assert_int_eq(built(ifd_responses_parse(&a, body, strlen(body), &r, &e), &a, &r, &e), 0);
    ck_assert_uint_eq(r.n_messages, 1);
    ck_assert_str_eq(r.messages[0].role, "user");
    ck_assert_str_eq(r.messages[0].content, "hi");
    ck_assert_ptr_nonnull(r.grammar);
    ck_assert(!r.logprobs);
    ck_assert_int_eq(r.max_tokens, -1);

    static const struct {
        const char *body, *param, *code;
    } bad[] = {
        {"{\"input\":\"x\",\"previous_response_id\":\"resp_1\"}", "previous_response_id",
         "unsupported_parameter"},
        {"{\"input\":\"x\",\"conversation\":\"c\"}", "conversation", "unsupported_parameter"},
        {"{\"input\":\"x\",\"prompt_logprobs\":1}", "prompt_logprobs", "unsupported_parameter"},
        {"{\"input\":\"x\",\"background\":true}", "background", "unsupported_parameter"},
        {"{\"input\":\"x\",\"truncation\":\"auto\"}", "truncation", "unsupported_parameter"},
        {"{\"input\":\"x\",\"reasoning\":{\"effort\":\"huge\"}}", "reasoning.effort",
         "invalid_value"},
        {"{\"input\":\"x\",\"reasoning\":{\"summary\":1}}", "reasoning.summary", "invalid_type"},
        {"{\"input\":\"x\",\"reasoning\":true}", "reasoning", "invalid_type"},
        {"{\"input\":\"x\",\"n\":2}", "n", "unsupported_parameter"},
        {"{\"input\":\"x\",\"include\":[\"file_search_call.results\"]}", "include[0]",
         "unsupported_parameter"},
        {"{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", "tools[0].type",
         "unsupported_parameter"},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\","
         "\"file_id\":\"f\"}]}]}",
         "input[0].content[0].image_url", "unsupported_parameter"},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\","
         "\"image_url\":{\"url\":\"u\"}}]}]}",
         "input[0].content[0].image_url", "invalid_type"},
        {"{\"input\":[{\"type\":\"reasoning\",\"encrypted_content\":\"e\"}]}",
         "input[0].encrypted_content", "unsupported_parameter"},
        {"{\"input\":[{\"type\":\"reasoning\",\"summary\":[{\"text\":2}]}]}",
         "input[0].summary[0].text", "invalid_type"},
        {"{\"input\":[{\"type\":\"item_reference\"}]}", "input[0].type", "unsupported_parameter"},
        {"{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens",
         "integer_below_min_value"},
        {"{\"input\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "input[0].role", "invalid_value"},
        {"{\"instructions\":\"x\"}", "input", "missing_required_parameter"},
        {"{\"input\":[]}", "input", "invalid_value"},
        {"{\"input\":\"x\",\"temperature\":3}", "temperature", "decimal_above_max_value"},
        {"{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"xml\"}}}", "text.format.type",
         "invalid_value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&e, 0, sizeof e);
        int rc = built(ifd_responses_parse(&a, bad[i].body, strlen(bad[i].body), &r, &e), &a, &r, &e);
        ck_assert_msg(rc == IFD_EINVAL && e.status == 400, "case %zu accepted: %s", i,
                      bad[i].body);
        ck_assert_msg(!strcmp(e.param, bad[i].param), "case %zu: param '%s', wanted '%s' (%s)",
                      i, e.param, bad[i].param, e.message);
        ck_assert_msg(!strcmp(e.code, bad[i].code), "case %zu: code '%s', wanted '%s' (%s)", i,
                      e.code, bad[i].code, e.message);
    }
    ifd_arena_close(&a);
}
END_TEST

/* reasoning: the effort reaches the template as reasoning_effort (the
 * client's own kwarg wins); reasoning items are replayed on their assistant
 * message as reasoning and reasoning_content (content parts, else summary). */
START_TEST(test_responses_reasoning)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    const char *body = "{\"input\":\"x\",\"reasoning\":{\"effort\":\"low\",\"summary\":\"auto\"}}";
    ck_assert_int_eq(built(ifd_responses_parse(&a, body, strlen(body), &r, &e), &a, &r, &e), 0);
    ck_assert_str_eq(r.template_kwargs, "{\"reasoning_effort\":\"low\"}");
    json_t *echo = load(r.responses_echo, strlen(r.responses_echo));
    ck_assert_str_eq(js(echo, "reasoning.effort"), "low");
    ck_assert_str_eq(js(echo, "reasoning.summary"), "auto");
    json_decref(echo);
    body = "{\"input\":\"x\",\"reasoning\":{\"effort\":\"high\"},"
           "\"chat_template_kwargs\":{\"reasoning_effort\":\"mine\",\"enable_thinking\":false}}";
    ck_assert_int_eq(built(ifd_responses_parse(&a, body, strlen(body), &r, &e), &a, &r, &e), 0);
    ck_assert_ptr_nonnull(strstr(r.template_kwargs, "\"reasoning_effort\":\"mine\""));
    ck_assert_ptr_nonnull(strstr(r.template_kwargs, "\"enable_thinking\":false"));
    body = "{\"input\":\"x\",\"reasoning\":{\"effort\":null}}";
    ck_assert_int_eq(built(ifd_responses_parse(&a, body, strlen(body), &r, &e), &a, &r, &e), 0);
    ck_assert_ptr_null(r.template_kwargs);
    /* user, reasoning, its answer, reasoning (summary) + a call, the call's output */
    body = "{\"input\":[{\"role\":\"user\",\"content\":\"q\"},"
           "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[{\"type\":\"summary_text\","
           "\"text\":\"S\"}],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"A\"},"
           "{\"type\":\"reasoning_text\",\"text\":\"B\"}]},"
           "{\"type\":\"message\",\"role\":\"assistant\",\"content\":\"ans\"},"
           "{\"role\":\"user\",\"content\":\"q2\"},"
           "{\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"T\"}]},"
           "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},"
           "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"1\"}]}";
    ck_assert_int_eq(built(ifd_responses_parse(&a, body, strlen(body), &r, &e), &a, &r, &e), 0);
    ck_assert_uint_eq(r.n_messages, 5);
    ck_assert_str_eq(r.messages[1].role, "assistant");
    ck_assert_str_eq(r.messages[1].content, "ans");
    ck_assert_str_eq(r.messages[3].role, "assistant");
    ck_assert_ptr_nonnull(r.messages[3].tool_calls);
    ck_assert_str_eq(r.messages[4].role, "tool");
    json_t *msgs = load(r.messages_json, strlen(r.messages_json));
    ck_assert_str_eq(js(msgs, "1.reasoning"), "A\nB");
    ck_assert_str_eq(js(msgs, "1.reasoning_content"), "A\nB");
    ck_assert_str_eq(js(msgs, "3.reasoning_content"), "T");
    ck_assert_ptr_null(jp(msgs, "0.reasoning_content"));
    json_decref(msgs);
    /* after an assistant message that has its reasoning: a new message */
    body = "{\"input\":[{\"role\":\"user\",\"content\":\"q\"},"
           "{\"role\":\"assistant\",\"content\":\"a\"},"
           "{\"type\":\"reasoning\",\"summary\":[{\"text\":\"R1\"}]},"
           "{\"type\":\"reasoning\",\"summary\":[{\"text\":\"R2\"}]}]}";
    ck_assert_int_eq(built(ifd_responses_parse(&a, body, strlen(body), &r, &e), &a, &r, &e), 0);
    ck_assert_uint_eq(r.n_messages, 3);
    msgs = load(r.messages_json, strlen(r.messages_json));
    ck_assert_str_eq(js(msgs, "1.reasoning_content"), "R1"); /* vLLM: the message before */
    ck_assert_str_eq(js(msgs, "2.reasoning_content"), "R2");
    ck_assert_str_eq(r.messages[2].content, "");
    json_decref(msgs);
    ifd_arena_close(&a);
}
END_TEST

/* Appends s to b n times. */
static void puts_n(ifd_buf_t *b, const char *s, int n)
{
    for (int i = 0; i < n; i++)
        ifd_buf_puts(b, s);
}

/* What a Response repeats and the store keeps of its request: user and
 * metadata within OpenAI's bounds (characters, not bytes), refused past
 * them with the field and the limit named. */
START_TEST(test_responses_echo_bounds)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    ifd_buf_t b = IFD_BUF_INIT;
    /* at the bounds: 16 pairs, a 64-character key, a 512-character value and
     * a 256-character user, in 2-byte characters */
    ifd_buf_puts(&b, "{\"input\":\"x\",\"user\":\"");
    puts_n(&b, "\xc3\xa9", 256);
    ifd_buf_puts(&b, "\",\"metadata\":{\"");
    puts_n(&b, "\xc3\xa9", 64);
    ifd_buf_puts(&b, "\":\"");
    puts_n(&b, "\xc3\xa9", 512);
    ifd_buf_puts(&b, "\"");
    for (int i = 1; i < 16; i++)
        ifd_buf_printf(&b, ",\"k%d\":\"v\"", i);
    ifd_buf_puts(&b, "}}");
    ck_assert_int_eq(ifd_responses_parse(&a, b.data, b.len, &r, &e), 0);
    /* wrong types, and one past each bound: head, unit × n, tail */
    static const struct {
        const char *head, *unit;
        int n;
        const char *tail, *param, *code, *words;
    } bad[] = {
        {"{\"input\":\"x\",\"user\":7}", "", 0, "", "user", "invalid_type", "expected a string"},
        {"{\"input\":\"x\",\"metadata\":[1]}", "", 0, "", "metadata", "invalid_type", "an object"},
        {"{\"input\":\"x\",\"metadata\":{\"k\":1}}", "", 0, "", "metadata.k", "invalid_type",
         "a string"},
        {"{\"input\":\"x\",\"metadata\":{\"k\":null}}", "", 0, "", "metadata.k", "invalid_type",
         "a string"},
        {"{\"input\":\"x\",\"user\":\"", "u", 257, "\"}", "user", "string_above_max_length",
         "Invalid 'user': string too long. Expected a string with maximum length 256, but got a "
         "string with length 257 instead."},
        {"{\"input\":\"x\",\"metadata\":{\"", "k", 65, "\":\"v\"}}", "metadata",
         "string_above_max_length", "maximum length 64"},
        {"{\"input\":\"x\",\"metadata\":{\"note\":\"", "v", 513, "\"}}", "metadata.note",
         "string_above_max_length", "maximum length 512, but got a string with length 513"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ifd_buf_clear(&b);
        ifd_buf_puts(&b, bad[i].head);
        puts_n(&b, bad[i].unit, bad[i].n);
        ifd_buf_puts(&b, bad[i].tail);
        ck_assert_int_eq(ifd_responses_parse(&a, b.data, b.len, &r, &e), IFD_EINVAL);
        ck_assert_str_eq(e.param, bad[i].param);
        ck_assert_str_eq(e.code, bad[i].code);
        ck_assert_msg(strstr(e.message, bad[i].words), "%s", e.message);
    }
    ifd_buf_clear(&b);
    ifd_buf_puts(&b, "{\"input\":\"x\",\"metadata\":{");
    for (int i = 0; i < 17; i++)
        ifd_buf_printf(&b, "%s\"k%d\":\"v\"", i ? "," : "", i);
    ifd_buf_puts(&b, "}}");
    ck_assert_int_eq(ifd_responses_parse(&a, b.data, b.len, &r, &e), IFD_EINVAL);
    ck_assert_str_eq(e.param, "metadata");
    ck_assert_str_eq(e.code, "object_above_max_properties");
    ck_assert_ptr_nonnull(strstr(e.message, "at most 16 properties"));
    ifd_buf_free(&b);
    ifd_arena_close(&a);
}
END_TEST

static const ifd_oai_meta_t k_resp_meta = {IFD_OAI_RESPONSES, "resp_00ff", "smol", 1700000002,
                                           NULL, "{\"instructions\":\"hi\",\"store\":false}"};

START_TEST(test_responses_object)
{
    ifd_oai_tool_call_t tc = {"call_ab", "add", "{\"x\":1}"};
    ifd_oai_logprob_t lp = {"Ok", 2, -0.25f, NULL, 0, false};
    ifd_oai_choice_t c = {.text = "Ok",
                          .text_len = 2,
                          .finish_reason = "tool_calls",
                          .has_logprobs = true,
                          .logprobs = &lp,
                          .n_logprobs = 1,
                          .tool_calls = &tc,
                          .n_tool_calls = 1};
    ifd_oai_usage_t u = {10, 4, 8};
    ifd_buf_t b = IFD_BUF_INIT;
    ifd_oai_choice_t two[2] = {c, c}; /* (the function reads every choice it is given) */
    ck_assert_int_eq(ifd_oai_response_json(&b, &k_resp_meta, two, 2, &u), IFD_EINVAL);
    ck_assert_int_eq(ifd_oai_response_json(&b, &k_resp_meta, &c, 1, &u), 0);
    json_t *j = load(b.data, b.len);
    ck_assert_str_eq(js(j, "id"), "resp_00ff");
    ck_assert_str_eq(js(j, "object"), "response");
    ck_assert_int_eq(ji(j, "created_at"), 1700000002);
    ck_assert_str_eq(js(j, "status"), "completed");
    ck_assert(jnull(j, "incomplete_details") && jnull(j, "error"));
    ck_assert_str_eq(js(j, "instructions"), "hi"); /* the request's echo */
    ck_assert_str_eq(js(j, "output.0.type"), "message");
    ck_assert_str_eq(js(j, "output.0.id"), "msg_00ff");
    ck_assert_str_eq(js(j, "output.0.role"), "assistant");
    ck_assert_str_eq(js(j, "output.0.content.0.type"), "output_text");
    ck_assert_str_eq(js(j, "output.0.content.0.text"), "Ok");
    ck_assert_str_eq(js(j, "output.0.content.0.logprobs.0.token"), "Ok");
    ck_assert_str_eq(js(j, "output.1.type"), "function_call");
    ck_assert_str_eq(js(j, "output.1.id"), "fc_ab");
    ck_assert_str_eq(js(j, "output.1.call_id"), "call_ab");
    ck_assert_str_eq(js(j, "output.1.name"), "add");
    ck_assert_str_eq(js(j, "output.1.arguments"), "{\"x\":1}");
    ck_assert_int_eq(ji(j, "usage.input_tokens"), 10);
    ck_assert_int_eq(ji(j, "usage.output_tokens"), 4);
    ck_assert_int_eq(ji(j, "usage.total_tokens"), 14);
    ck_assert_int_eq(ji(j, "usage.input_tokens_details.cached_tokens"), 8);
    json_decref(j);
    /* max_output_tokens reached: incomplete */
    c = (ifd_oai_choice_t){.text = "abc", .text_len = 3, .finish_reason = "length"};
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_oai_response_json(&b, &k_resp_meta, &c, 1, &u), 0);
    j = load(b.data, b.len);
    ck_assert_str_eq(js(j, "status"), "incomplete");
    ck_assert_str_eq(js(j, "incomplete_details.reason"), "max_output_tokens");
    ck_assert_uint_eq(json_array_size(jp(j, "output")), 1);
    json_decref(j);
    ifd_buf_free(&b);
}
END_TEST

/* generation_config defaults on a Response: the echo shows the values in
 * force, field by field; the Response JSON prints them as given (0.6, not
 * 0.60000002). */
START_TEST(test_responses_echo_defaults)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    const ifd_oai_sampling_defaults_t d = {0.6f, 0.9f, -1.0f, -1.0f, -1};
    const char *body = "{\"input\":\"hi\",\"temperature\":0.25}";
    ck_assert_int_eq(built(ifd_responses_parse(&a, body, strlen(body), &r, &e), &a, &r, &e), 0);
    const uint32_t set = ifd_oai_apply_sampling_defaults(&r, &d);
    ck_assert_uint_eq(set, IFD_OAI_GIVEN_TOP_P);
    ck_assert_int_eq(ifd_responses_echo_defaults(&a, &r, set), 0);
    ifd_oai_meta_t m = k_resp_meta;
    m.responses_echo = r.responses_echo;
    ifd_oai_choice_t c = {.text = "Ok", .text_len = 2, .finish_reason = "stop"};
    ifd_oai_usage_t u = {3, 1, 0};
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_oai_response_json(&b, &m, &c, 1, &u), 0);
    ck_assert_msg(strstr(b.data, "\"top_p\":0.9,") || strstr(b.data, "\"top_p\":0.9}"), "%s",
                  b.data);
    json_t *j = load(b.data, b.len);
    ck_assert(jnum(j, "temperature") == 0.25); /* the request's own value */
    ck_assert(jnum(j, "top_p") == 0.9);        /* the model's default */
    json_decref(j);
    /* nothing set: the echo is untouched (OpenAI's 1.0) */
    ck_assert_int_eq(built(ifd_responses_parse(&a, "{\"input\":\"x\"}", 13, &r, &e), &a, &r, &e), 0);
    const char *before = r.responses_echo;
    ck_assert_int_eq(ifd_responses_echo_defaults(&a, &r, 0), 0);
    ck_assert_ptr_eq(r.responses_echo, before);
    ifd_buf_free(&b);
    ifd_arena_close(&a);
}
END_TEST

/* A fake store: one conversation, kept under "resp_old". */
static const char *fake_conversation(void *ctx, const char *id)
{
    return strcmp(id, "resp_old") ? NULL : (const char *)ctx;
}

START_TEST(test_responses_stored)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    ifd_responses_state_t st;
    const char *prior = "[{\"role\":\"user\",\"content\":\"q1\"},"
                        "{\"role\":\"assistant\",\"content\":\"a1\"}]";
    ifd_responses_store_t on = {true, fake_conversation, (void *)prior};
    ifd_responses_store_t off = {false, fake_conversation, (void *)prior};
    /* store defaults to true with a store, false without one or when asked */
    const char *plain = "{\"input\":\"x\"}";
    ck_assert_int_eq(ifd_responses_parse_stored(&a, plain, strlen(plain), &on, &r, &st, &e), 0);
    ck_assert(st.store && !st.previous_response_id);
    ck_assert_ptr_nonnull(strstr(r.responses_echo, "\"store\":true"));
    ck_assert_int_eq(ifd_responses_parse_stored(&a, plain, strlen(plain), &off, &r, &st, &e), 0);
    ck_assert(!st.store);
    ck_assert_ptr_nonnull(strstr(r.responses_echo, "\"store\":false"));
    const char *nostore = "{\"input\":\"x\",\"store\":false}";
    ck_assert_int_eq(ifd_responses_parse_stored(&a, nostore, strlen(nostore), &on, &r, &st, &e), 0);
    ck_assert(!st.store);
    /* previous_response_id: instructions, the stored conversation, the input */
    const char *cont = "{\"input\":\"q2\",\"instructions\":\"I\","
                       "\"previous_response_id\":\"resp_old\"}";
    ck_assert_int_eq(ifd_responses_parse_stored(&a, cont, strlen(cont), &on, &r, &st, &e), 0);
    ck_assert_str_eq(st.previous_response_id, "resp_old");
    ck_assert_uint_eq(r.n_messages, 4);
    ck_assert_str_eq(r.messages[0].role, "system");
    ck_assert_str_eq(r.messages[0].content, "I");
    ck_assert_str_eq(r.messages[1].content, "q1");
    ck_assert_str_eq(r.messages[2].content, "a1");
    ck_assert_str_eq(r.messages[3].content, "q2");
    ck_assert_ptr_nonnull(strstr(r.responses_echo, "\"previous_response_id\":\"resp_old\""));
    /* the conversation kept with its answer: no instructions, the answer's text and calls */
    ifd_oai_tool_call_t tc = {"call_7", "add", "{\"x\":1}"};
    ifd_oai_choice_t ans = {.text = "a2", .text_len = 2, .tool_calls = &tc, .n_tool_calls = 1};
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_responses_conversation(&b, &r, &ans), 0);
    ck_assert_str_eq(b.data, "[{\"role\":\"user\",\"content\":\"q1\"},"
                             "{\"role\":\"assistant\",\"content\":\"a1\"},"
                             "{\"role\":\"user\",\"content\":\"q2\"},"
                             "{\"role\":\"assistant\",\"content\":\"a2\",\"tool_calls\":[{\"id\":"
                             "\"call_7\",\"type\":\"function\",\"function\":{\"name\":\"add\","
                             "\"arguments\":\"{\\\"x\\\":1}\"}}]}]");
    ifd_buf_clear(&b);
    ifd_oai_choice_t calls_only = {.tool_calls = &tc, .n_tool_calls = 1};
    ck_assert_int_eq(ifd_responses_conversation(&b, &r, &calls_only), 0);
    ck_assert_ptr_nonnull(strstr(b.data, "{\"role\":\"assistant\",\"content\":null,"));
    ifd_buf_free(&b);
    /* not kept: 404; the store off or not a string: 400 */
    const char *gone = "{\"input\":\"q\",\"previous_response_id\":\"resp_new\"}";
    ck_assert_int_eq(ifd_responses_parse_stored(&a, gone, strlen(gone), &on, &r, &st, &e),
                     IFD_EINVAL);
    ck_assert_int_eq(e.status, 404);
    ck_assert_str_eq(e.param, "previous_response_id");
    ck_assert_str_eq(e.code, "previous_response_not_found");
    ck_assert_int_eq(ifd_responses_parse_stored(&a, cont, strlen(cont), &off, &r, &st, &e),
                     IFD_EINVAL);
    ck_assert_int_eq(e.status, 400);
    ck_assert_str_eq(e.param, "previous_response_id");
    ck_assert_int_eq(built(ifd_responses_parse(&a, cont, strlen(cont), &r, &e), &a, &r, &e), IFD_EINVAL);
    ck_assert_int_eq(e.status, 400);
    const char *num = "{\"input\":\"q\",\"previous_response_id\":5}";
    ck_assert_int_eq(ifd_responses_parse_stored(&a, num, strlen(num), &on, &r, &st, &e),
                     IFD_EINVAL);
    ck_assert_str_eq(e.param, "previous_response_id");
    /* background: with the store and store not false (streamed or not) */
    const char *bg = "{\"input\":\"q\",\"background\":true}";
    ck_assert_int_eq(ifd_responses_parse_stored(&a, bg, strlen(bg), &on, &r, &st, &e), 0);
    ck_assert(st.background && st.store);
    ck_assert_ptr_nonnull(strstr(r.responses_echo, "\"background\":true"));
    const char *bgs = "{\"input\":\"q\",\"background\":true,\"stream\":true}";
    ck_assert_int_eq(ifd_responses_parse_stored(&a, bgs, strlen(bgs), &on, &r, &st, &e), 0);
    ck_assert(st.background && r.stream);
    static const struct {
        const char *body, *code;
        bool store_on;
    } bad_bg[] = {
        {"{\"input\":\"q\",\"background\":true}", "unsupported_parameter", false},
        {"{\"input\":\"q\",\"background\":true,\"store\":false}", "invalid_value", true},
        {"{\"input\":\"q\",\"background\":1}", "invalid_type", true},
    };
    for (size_t i = 0; i < sizeof bad_bg / sizeof bad_bg[0]; i++) {
        ck_assert_int_eq(ifd_responses_parse_stored(&a, bad_bg[i].body, strlen(bad_bg[i].body),
                                                    bad_bg[i].store_on ? &on : &off, &r, &st, &e),
                         IFD_EINVAL);
        ck_assert_int_eq(e.status, 400);
        ck_assert_str_eq(e.param, "background");
        ck_assert_str_eq(e.code, bad_bg[i].code);
    }
    /* a background Response's status object: no output, no usage; failed with its error */
    ck_assert_int_eq(ifd_responses_parse_stored(&a, bg, strlen(bg), &on, &r, &st, &e), 0);
    ifd_oai_meta_t m = {IFD_OAI_RESPONSES, "resp_abc", "smol", 7, NULL, r.responses_echo};
    ck_assert_int_eq(ifd_responses_status_json(&b, &m, "queued", NULL), 0);
    json_t *q = load(b.data, b.len);
    ck_assert_str_eq(js(q, "status"), "queued");
    ck_assert_str_eq(js(q, "id"), "resp_abc");
    ck_assert(json_is_null(jp(q, "usage")) && json_is_null(jp(q, "error")));
    ck_assert_uint_eq(json_array_size(jp(q, "output")), 0);
    ck_assert(json_is_true(jp(q, "background")));
    json_decref(q);
    ifd_buf_clear(&b);
    ifd_oai_error_t fe;
    ifd_oai_error_set(&fe, 503, NULL, NULL, NULL, "shutting down");
    ck_assert_int_eq(ifd_responses_status_json(&b, &m, "failed", &fe), 0);
    q = load(b.data, b.len);
    ck_assert_str_eq(js(q, "status"), "failed");
    ck_assert_str_eq(js(q, "error.code"), "server_error");
    ck_assert_str_eq(js(q, "error.message"), "shutting down");
    json_decref(q);
    ifd_buf_free(&b);
    ifd_arena_close(&a);
}
END_TEST

/* The events of a stream: [{"event": name, "data": object}]. */
static json_t *sse_events(const ifd_buf_t *b)
{
    ifd_sse_parser_t p;
    ifd_sse_parser_init(&p, 0);
    ck_assert_int_eq(ifd_sse_parser_feed(&p, b->data, b->len), 0);
    json_t *out = json_array();
    ifd_sse_event_t ev;
    while (ifd_sse_parser_next(&p, &ev) == 1) {
        ck_assert_msg(strcmp(ev.data, "[DONE]") != 0, "[DONE] in a Responses stream");
        json_t *d = load(ev.data, ev.len);
        ck_assert_str_eq(js(d, "type"), ev.event); /* event: line = data.type */
        json_array_append_new(out, d);
    }
    ifd_sse_parser_close(&p);
    return out;
}

START_TEST(test_responses_stream)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_stream_t s;
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_oai_stream_init(&s, &a, &k_resp_meta, 2, false), IFD_EINVAL);
    ck_assert_int_eq(ifd_oai_stream_init(&s, &a, &k_resp_meta, 1, false), 0);
    ck_assert_int_eq(ifd_oai_stream_start(&s, &b), 0);
    ifd_oai_choice_t c = {.text = "Hel", .text_len = 3};
    ck_assert_int_eq(ifd_oai_stream_delta(&s, &b, &c), 0);
    c = (ifd_oai_choice_t){.text = "lo", .text_len = 2};
    ck_assert_int_eq(ifd_oai_stream_delta(&s, &b, &c), 0);
    ifd_oai_tool_call_t tc[2] = {{"call_1", "f", "{}"}, {"call_2", "g", "{\"a\":[1]}"}};
    c = (ifd_oai_choice_t){.tool_calls = tc, .n_tool_calls = 2};
    ck_assert_int_eq(ifd_oai_stream_tool_calls(&s, &b, &c), 0);
    c = (ifd_oai_choice_t){.finish_reason = "tool_calls"};
    ck_assert_int_eq(ifd_oai_stream_finish(&s, &b, &c), 0);
    ifd_oai_usage_t u = {5, 6, 0};
    ck_assert_int_eq(ifd_oai_stream_end(&s, &b, &u), 0);
    ck_assert_int_eq(ifd_oai_stream_end(&s, &b, &u), IFD_EINVAL);

    json_t *ev = sse_events(&b);
    static const char *const want[] = {
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed"};
    size_t n = json_array_size(ev);
    ck_assert_uint_eq(n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < n; i++) {
        ck_assert_str_eq(js(json_array_get(ev, i), "type"), want[i]);
        ck_assert_int_eq(ji(json_array_get(ev, i), "sequence_number"), (long long)i);
    }
    ck_assert_str_eq(js(ev, "0.response.id"), "resp_00ff");
    ck_assert_str_eq(js(ev, "0.response.status"), "in_progress");
    ck_assert_uint_eq(json_array_size(jp(ev, "0.response.output")), 0);
    ck_assert_str_eq(js(ev, "2.item.id"), "msg_00ff");
    ck_assert_str_eq(js(ev, "4.item_id"), "msg_00ff");
    ck_assert_str_eq(js(ev, "4.delta"), "Hel");
    ck_assert_str_eq(js(ev, "6.text"), "Hello");
    ck_assert_str_eq(js(ev, "8.item.content.0.text"), "Hello");
    ck_assert_int_eq(ji(ev, "9.output_index"), 1);
    ck_assert_str_eq(js(ev, "9.item.arguments"), "");
    ck_assert_str_eq(js(ev, "10.delta"), "{}");
    ck_assert_str_eq(js(ev, "15.arguments"), "{\"a\":[1]}");
    ck_assert_str_eq(js(ev, "16.item.id"), "fc_2");
    ck_assert_int_eq(ji(ev, "16.output_index"), 2);
    ck_assert_str_eq(js(ev, "17.response.status"), "completed");
    ck_assert_str_eq(js(ev, "17.response.output.0.content.0.text"), "Hello");
    ck_assert_str_eq(js(ev, "17.response.output.2.call_id"), "call_2");
    ck_assert_int_eq(ji(ev, "17.response.usage.output_tokens"), 6);
    json_decref(ev);

    /* an empty answer cut by the length: one empty message, incomplete */
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_oai_stream_init(&s, &a, &k_resp_meta, 1, false), 0);
    c = (ifd_oai_choice_t){.finish_reason = "length"};
    ck_assert_int_eq(ifd_oai_stream_finish(&s, &b, &c), 0);
    ck_assert_int_eq(ifd_oai_stream_end(&s, &b, &u), 0);
    ev = sse_events(&b);
    n = json_array_size(ev);
    ck_assert_str_eq(js(json_array_get(ev, n - 1), "type"), "response.incomplete");
    ck_assert_str_eq(js(json_array_get(ev, n - 1), "response.incomplete_details.reason"),
                     "max_output_tokens");
    ck_assert_str_eq(js(json_array_get(ev, n - 1), "response.output.0.content.0.text"), "");
    json_decref(ev);

    /* a failure: an error event (with "error", which the SDK raises) then response.failed */
    ifd_buf_clear(&b);
    ck_assert_int_eq(ifd_oai_stream_init(&s, &a, &k_resp_meta, 1, false), 0);
    c = (ifd_oai_choice_t){.text = "x", .text_len = 1};
    ck_assert_int_eq(ifd_oai_stream_delta(&s, &b, &c), 0);
    ifd_oai_error_t e;
    ifd_oai_error_set(&e, 503, NULL, NULL, NULL, "worker gone");
    ck_assert_int_eq(ifd_oai_stream_fail(&s, &b, &e), 0);
    ev = sse_events(&b);
    n = json_array_size(ev);
    ck_assert_str_eq(js(json_array_get(ev, n - 2), "type"), "error");
    ck_assert_str_eq(js(json_array_get(ev, n - 2), "error.message"), "worker gone");
    ck_assert_str_eq(js(json_array_get(ev, n - 1), "type"), "response.failed");
    ck_assert_str_eq(js(json_array_get(ev, n - 1), "response.status"), "failed");
    json_decref(ev);
    ifd_buf_free(&b);
    ifd_arena_close(&a);
}
END_TEST

/* inferd's "speculative": the wire's form (method 1 off, 2 ngram; 0 fields the daemon's). */
START_TEST(test_speculative_field)
{
    static const struct {
        const char *json;
        ifd_wire_spec_t want;
    } cases[] = {
        {"", {0, 0, 0, 0}},
        {",\"speculative\":null", {0, 0, 0, 0}},
        {",\"speculative\":false", {1, 0, 0, 0}},
        {",\"speculative\":true", {2, 0, 0, 0}},
        {",\"speculative\":{}", {2, 0, 0, 0}},
        {",\"speculative\":{\"method\":\"off\",\"num_speculative_tokens\":3}", {1, 3, 0, 0}},
        {",\"speculative\":{\"method\":\"ngram\",\"num_speculative_tokens\":16,"
         "\"prompt_lookup_min\":2,\"prompt_lookup_max\":5}",
         {2, 16, 2, 5}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ifd_arena_t a;
        ifd_arena_init(&a, 0);
        ifd_oai_request_t r;
        ifd_oai_error_t e;
        char body[512];
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]%s}",
                 cases[i].json);
        ck_assert_int_eq(ifd_oai_parse_chat(&a, body, strlen(body), &r, &e), 0);
        ck_assert_mem_eq(&r.spec, &cases[i].want, sizeof r.spec);
        ifd_arena_close(&a);
    }
}
END_TEST

START_TEST(test_continuous_usage_and_min_tokens)
{
    ifd_arena_t a;
    ifd_arena_init(&a, 0);
    ifd_oai_request_t r;
    ifd_oai_error_t e;
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"min_tokens\":3,"
                       "\"max_tokens\":9,\"stream\":true,\"stream_options\":{\"include_usage\":"
                       "true,\"continuous_usage_stats\":true}}";
    ck_assert_int_eq(built(ifd_oai_parse_chat(&a, body, strlen(body), &r, &e), &a, &r, &e), 0);
    ck_assert_uint_eq(r.min_tokens, 3);
    ck_assert(r.continuous_usage && r.include_usage);
    ifd_oai_stream_t s;
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_oai_stream_init(&s, &a, &k_chat_meta, 1, true), 0);
    ifd_oai_usage_t live = {7, 1, 0};
    s.live_usage = &live;
    ifd_oai_choice_t c = {.text = "a", .text_len = 1};
    ck_assert_int_eq(ifd_oai_stream_delta(&s, &b, &c), 0);
    live.completion_tokens = 2;
    c = (ifd_oai_choice_t){.text = "b", .text_len = 1, .finish_reason = "stop"};
    ck_assert_int_eq(ifd_oai_stream_finish(&s, &b, &c), 0);
    ck_assert_int_eq(ifd_oai_stream_end(&s, &b, &live), 0);
    int done = 0;
    json_t *chunks = sse_chunks(&b, &done);
    ck_assert_uint_eq(json_array_size(chunks), 3);
    ck_assert_int_eq(ji(chunks, "0.usage.completion_tokens"), 1);
    ck_assert_int_eq(ji(chunks, "1.usage.completion_tokens"), 2);
    ck_assert_int_eq(ji(chunks, "1.usage.total_tokens"), 9);
    ck_assert_int_eq(ji(chunks, "2.usage.completion_tokens"), 2);
    json_decref(chunks);
    ifd_buf_free(&b);
    ifd_arena_close(&a);
}
END_TEST

/* A large prompt_logprobs array (rows of 1,500 alternatives whose ids repeat,
 * as a top of -1 over a small vocabulary would make): each row holds every id
 * once, in the order of its first place, with the values of its last place
 * (rank = that place; the token's own rank where the token's id comes last) —
 * checked against a reference that tracks each id's first and last place. */
START_TEST(test_prompt_logprobs_large)
{
    enum { ROWS = 24, ALTS = 1500, IDS = 400 };
    static ifd_oai_plp_token_t alts[ROWS][ALTS];
    static ifd_oai_prompt_logprob_t rows[ROWS];
    static char names[IDS][16];
    for (int i = 0; i < IDS; i++)
        snprintf(names[i], sizeof names[i], "t%d", i);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int r = 0; r < ROWS; r++) {
        for (int k = 0; k < ALTS; k++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            int32_t id = (int32_t)(rng % IDS);
            alts[r][k] = (ifd_oai_plp_token_t){id, names[id], strlen(names[id]),
                                               -(float)(k + 1) / 64.0f, (uint32_t)(k + 1)};
        }
        int32_t tid = (int32_t)((rng >> 20) % IDS);
        rows[r] = (ifd_oai_prompt_logprob_t){
            {tid, names[tid], strlen(names[tid]), -0.125f, 7 + (uint32_t)r}, alts[r],
            r % 3 ? ALTS : ALTS / 2};
    }
    const uint32_t top = ALTS - 100; /* rows of ALTS are cut there */
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_oai_prompt_logprobs_json(&b, rows, ROWS, top), 0);
    json_t *j = load(b.data, b.len);
    ck_assert_int_eq(json_array_size(j), ROWS + 1);
    ck_assert(json_is_null(json_array_get(j, 0)));
    static int first[IDS], last[IDS];
    for (int r = 0; r < ROWS; r++) {
        const ifd_oai_prompt_logprob_t *p = &rows[r];
        size_t m = p->n_top < top ? p->n_top : top;
        for (int i = 0; i < IDS; i++)
            first[i] = last[i] = -1;
        for (size_t e = 0; e <= m; e++) {
            int32_t id = e ? p->top[e - 1].id : p->tok.id;
            if (first[id] < 0)
                first[id] = (int)e;
            last[id] = (int)e;
        }
        json_t *row = json_array_get(j, (size_t)r + 1);
        const char *key;
        json_t *val;
        size_t e = 0, seen = 0;
        json_object_foreach(row, key, val)
        {
            while (e <= m && first[e ? p->top[e - 1].id : p->tok.id] != (int)e)
                e++;
            ck_assert_uint_le(e, m);
            int32_t id = e ? p->top[e - 1].id : p->tok.id;
            char want[16];
            snprintf(want, sizeof want, "%d", id);
            ck_assert_str_eq(key, want);
            const ifd_oai_plp_token_t *t = last[id] ? &p->top[last[id] - 1] : &p->tok;
            uint32_t rank = last[id] ? (uint32_t)last[id] : p->tok.rank;
            ck_assert_int_eq(json_integer_value(json_object_get(val, "rank")), rank);
            ck_assert((float)json_real_value(json_object_get(val, "logprob")) == t->logprob);
            ck_assert_str_eq(json_string_value(json_object_get(val, "decoded_token")), names[id]);
            e++, seen++;
        }
        size_t distinct = 0;
        for (int i = 0; i < IDS; i++)
            distinct += first[i] >= 0;
        ck_assert_uint_eq(seen, distinct);
    }
    json_decref(j);
    ifd_buf_free(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("proto_openai");
    TCase *tc = tcase_create("openai");
    tcase_add_test(tc, test_chat_minimal_defaults);
    tcase_add_test(tc, test_chat_every_field);
    tcase_add_test(tc, test_chat_nulls_are_absent);
    tcase_add_test(tc, test_sampling_defaults);
    tcase_add_test(tc, test_completion_prompt_shapes);
    tcase_add_test(tc, test_tokenize_detokenize);
    tcase_add_test(tc, test_invalid_requests);
    tcase_add_test(tc, test_nul_in_schema);
    tcase_add_test(tc, test_big_integers_in_schema);
    tcase_add_test(tc, test_strict_tools_enforced_when_callable);
    tcase_add_test(tc, test_nul_in_text);
    tcase_add_test(tc, test_invalid_wording_and_limits);
    tcase_add_test(tc, test_error_json);
    tcase_add_test(tc, test_chat_response);
    tcase_add_test(tc, test_completion_response);
    tcase_add_test(tc, test_chat_stream);
    tcase_add_test(tc, test_chat_stream_no_start_no_usage);
    tcase_add_test(tc, test_completion_stream);
    tcase_add_test(tc, test_models_tokenize_ids);
    tcase_add_test(tc, test_fuzz_requests);
    tcase_add_test(tc, test_structured_and_tools);
    tcase_add_test(tc, test_toolcall_parse);
    tcase_add_test(tc, test_tool_call_response);
    tcase_add_test(tc, test_responses_parse);
    tcase_add_test(tc, test_chat_image_parts);
    tcase_add_test(tc, test_responses_reasoning);
    tcase_add_test(tc, test_responses_echo_bounds);
    tcase_add_test(tc, test_responses_object);
    tcase_add_test(tc, test_responses_echo_defaults);
    tcase_add_test(tc, test_responses_stored);
    tcase_add_test(tc, test_responses_stream);
    tcase_add_test(tc, test_continuous_usage_and_min_tokens);
    tcase_add_test(tc, test_speculative_field);
    tcase_add_test(tc, test_prompt_logprobs);
    tcase_add_test(tc, test_prompt_logprobs_large);
    suite_add_tcase(s, tc);
    return ifd_test_run(s);
}
