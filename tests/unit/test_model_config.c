/*
 * test_model_config.c — ifd_model_config_from_hf on config.json files the
 * test writes: Llama 3.2's llama3 RoPE factors against MODEL-FORMATS.md
 * §2.4's published values, Gemma 3 4B's sparse text_config filled from
 * Gemma3TextConfig's defaults (layer pattern, local base, linear scaling on
 * global layers only, bf16-rounded embedding scale), transformers 5's
 * rope_parameters spelling, Qwen/Mistral specifics, generation_config.json,
 * and the errors for what inferd does not run.
 */
#include "kvpool/kvparams.h"
#include "testutil.h"

#include "error.h"
#include "modelfile/model_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

static void put(const char *name, const char *text)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/ifd_cfg_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void load_ok(ifd_model_config_t *c)
{
    char err[512] = "";
    int rc = ifd_model_config_from_hf(c, dir, err, sizeof err);
    ck_assert_msg(rc == 0, "rc %d: %s", rc, err);
}

static void load_fails(int want, const char *needle)
{
    ifd_model_config_t c;
    char err[512] = "";
    int rc = ifd_model_config_from_hf(&c, dir, err, sizeof err);
    ck_assert_msg(rc == want, "rc %d (%s), want %d: %s", rc, ifd_err_name(rc), want, err);
    ck_assert_msg(strstr(err, needle), "message '%s' lacks '%s'", err, needle);
}

START_TEST(test_llama32)
{
    put("config.json",
        "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":2048,"
        "\"intermediate_size\":8192,\"num_hidden_layers\":16,\"num_attention_heads\":32,"
        "\"num_key_value_heads\":8,\"head_dim\":64,\"max_position_embeddings\":131072,"
        "\"rms_norm_eps\":1e-05,\"rope_theta\":500000.0,\"vocab_size\":128256,"
        "\"rope_scaling\":{\"factor\":32.0,\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,"
        "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},"
        "\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\",\"hidden_act\":\"silu\"}");
    put("generation_config.json",
        "{\"eos_token_id\":[128001,128008,128009],\"temperature\":0.6,\"top_p\":0.9,"
        "\"do_sample\":true}");
    ifd_model_config_t c;
    load_ok(&c);
    ck_assert_int_eq(c.arch, IFD_ARCH_LLAMA);
    ck_assert_str_eq(c.arch_name, "llama");
    ck_assert_str_eq(c.hf_arch, "LlamaForCausalLM");
    ck_assert_str_eq(c.dtype, "bfloat16");
    ck_assert_int_eq(c.format, IFD_FORMAT_HF);
    ck_assert_uint_eq(c.n_layer, 16);
    ck_assert_uint_eq(c.n_head_kv, 8);
    ck_assert_uint_eq(c.head_dim, 64);
    ck_assert_uint_eq(c.n_vocab, 128256);
    ck_assert(c.rope_neox && c.tied_embeddings && c.has_rope_freqs);
    ck_assert(!c.has_qk_norm && !c.has_attn_bias);
    ck_assert(c.rope_freq_scale == 1.0f);
    ck_assert(fabsf(c.attn_scale - 0.125f) < 1e-7f);
    /* §2.4: head_dim 64 → 15×1, then 1.65133, 3.29226, 9.66673, then 14×32 */
    float f[32];
    ifd_model_config_rope_factors(&c, f);
    for (int i = 0; i < 15; i++)
        ck_assert(f[i] == 1.0f);
    ck_assert(fabsf(f[15] - 1.65133f) < 1e-4f);
    ck_assert(fabsf(f[16] - 3.29226f) < 1e-4f);
    ck_assert(fabsf(f[17] - 9.66673f) < 1e-4f);
    for (int i = 18; i < 32; i++)
        ck_assert(f[i] == 32.0f);
    ck_assert(c.gen.present && c.gen.do_sample);
    ck_assert_uint_eq(c.gen.n_eos, 3);
    ck_assert_int_eq(c.gen.eos_ids[2], 128009);
    ck_assert(fabsf(c.gen.temperature - 0.6f) < 1e-6f);
    ck_assert_int_lt(c.gen.top_k, 0); /* not given */
    ck_assert_str_eq(c.name, strrchr(dir, '/') + 1);
}
END_TEST

START_TEST(test_gemma3_4b_text_config)
{
    /* what google/gemma-3-4b-it's config lists: only the non-defaults */
    put("config.json",
        "{\"architectures\":[\"Gemma3ForConditionalGeneration\"],\"model_type\":\"gemma3\","
        "\"torch_dtype\":\"bfloat16\",\"mm_tokens_per_image\":256,"
        "\"text_config\":{\"hidden_size\":2560,\"intermediate_size\":10240,"
        "\"model_type\":\"gemma3_text\",\"num_hidden_layers\":34,"
        "\"rope_scaling\":{\"factor\":8.0,\"rope_type\":\"linear\"},\"sliding_window\":1024},"
        "\"vision_config\":{\"hidden_size\":1152}}");
    ifd_model_config_t c;
    load_ok(&c);
    ck_assert_int_eq(c.arch, IFD_ARCH_GEMMA3);
    ck_assert_uint_eq(c.n_vocab, 262208);
    ck_assert_uint_eq(c.n_head, 8);
    ck_assert_uint_eq(c.n_head_kv, 4);
    ck_assert_uint_eq(c.head_dim, 256);
    ck_assert_uint_eq(c.sliding_window, 1024);
    for (uint32_t l = 0; l < 34; l++)
        ck_assert_msg(c.layer_is_local[l] == ((l + 1) % 6 != 0), "layer %u", l);
    ck_assert(c.rope_base == 1e6f && c.rope_base_local == 10000.0f);
    ck_assert(c.rope_freq_scale == 0.125f && c.rope_freq_scale_local == 1.0f);
    ck_assert(fabsf(c.attn_scale - 1.0f / 16) < 1e-7f); /* query_pre_attn_scalar 256 */
    ck_assert(c.embd_scale == 50.5f);                    /* sqrt(2560) in bf16 (§5.2) */
    ck_assert(c.has_qk_norm && c.tied_embeddings && c.rope_neox);
    ck_assert(c.final_logit_softcap == 0.0f);
    ck_assert(!c.gen.present);
}
END_TEST

START_TEST(test_gemma3_layer_types_and_rope_parameters)
{
    put("config.json",
        "{\"architectures\":[\"Gemma3ForCausalLM\"],\"hidden_size\":640,"
        "\"intermediate_size\":2048,\"num_hidden_layers\":3,\"num_attention_heads\":4,"
        "\"num_key_value_heads\":1,\"head_dim\":256,\"vocab_size\":262144,"
        "\"query_pre_attn_scalar\":64,\"final_logit_softcapping\":30.0,"
        "\"torch_dtype\":\"float32\",\"sliding_window\":512,"
        "\"layer_types\":[\"sliding_attention\",\"full_attention\",\"sliding_attention\"],"
        "\"rope_parameters\":{\"full_attention\":{\"rope_theta\":2000000.0,"
        "\"rope_type\":\"default\"},\"sliding_attention\":{\"rope_theta\":20000.0,"
        "\"rope_type\":\"default\"}}}");
    ifd_model_config_t c;
    load_ok(&c);
    ck_assert(c.layer_is_local[0] && !c.layer_is_local[1] && c.layer_is_local[2]);
    ck_assert(c.rope_base == 2e6f && c.rope_base_local == 20000.0f);
    ck_assert(fabsf(c.attn_scale - 0.125f) < 1e-7f);
    ck_assert(c.final_logit_softcap == 30.0f);
    ck_assert(c.embd_scale == sqrtf(640.0f)); /* float32: exact */
}
END_TEST

START_TEST(test_qwen_mistral)
{
    put("config.json",
        "{\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":896,"
        "\"intermediate_size\":4864,\"num_hidden_layers\":24,\"num_attention_heads\":14,"
        "\"num_key_value_heads\":2,\"vocab_size\":151936,\"rope_theta\":1000000.0,"
        "\"tie_word_embeddings\":true,\"use_sliding_window\":false,\"sliding_window\":32768}");
    ifd_model_config_t c;
    load_ok(&c);
    ck_assert_int_eq(c.arch, IFD_ARCH_QWEN2);
    ck_assert(c.has_attn_bias && !c.has_qk_norm && c.sliding_window == 0);
    ck_assert_uint_eq(c.head_dim, 64);
    put("config.json",
        "{\"architectures\":[\"Qwen3ForCausalLM\"],\"hidden_size\":1024,"
        "\"intermediate_size\":3072,\"num_hidden_layers\":28,\"num_attention_heads\":16,"
        "\"num_key_value_heads\":8,\"head_dim\":128,\"vocab_size\":151936}");
    load_ok(&c);
    ck_assert_int_eq(c.arch, IFD_ARCH_QWEN3);
    ck_assert(c.has_qk_norm && !c.has_attn_bias && !c.tied_embeddings);
    ck_assert_uint_eq(c.head_dim, 128);
    put("config.json",
        "{\"architectures\":[\"MistralForCausalLM\"],\"hidden_size\":4096,"
        "\"intermediate_size\":14336,\"num_hidden_layers\":32,\"num_attention_heads\":32,"
        "\"num_key_value_heads\":8,\"head_dim\":null,\"vocab_size\":32000,"
        "\"sliding_window\":4096}");
    load_ok(&c);
    ck_assert_int_eq(c.arch, IFD_ARCH_LLAMA);
    ck_assert_str_eq(c.hf_arch, "MistralForCausalLM");
    ck_assert_uint_eq(c.head_dim, 128);
    ck_assert_uint_eq(c.sliding_window, 4096);
    ck_assert(c.layer_is_local[0] && c.layer_is_local[31]);
    ck_assert(c.rope_base_local == c.rope_base);
    /* Mistral v0.2 and later: "sliding_window": null (or absent) is full attention */
    static const char *const no_window[] = {",\"sliding_window\":null", ""};
    for (int i = 0; i < 2; i++) {
        char buf[512];
        snprintf(buf, sizeof buf,
                 "{\"architectures\":[\"MistralForCausalLM\"],\"hidden_size\":4096,"
                 "\"intermediate_size\":14336,\"num_hidden_layers\":32,"
                 "\"num_attention_heads\":32,\"num_key_value_heads\":8,"
                 "\"vocab_size\":32768%s}",
                 no_window[i]);
        put("config.json", buf);
        load_ok(&c);
        ck_assert_uint_eq(c.sliding_window, 0);
        ck_assert(!c.layer_is_local[0] && !c.layer_is_local[31]);
    }
}
END_TEST

START_TEST(test_errors)
{
    load_fails(-2 /* -ENOENT */, "config.json");
    put("config.json", "{\"architectures\": [");
    load_fails(IFD_EFORMAT, "not valid JSON");
    put("config.json", "[]");
    load_fails(IFD_EFORMAT, "not a JSON object");
    put("config.json", "{\"hidden_size\": 8}");
    load_fails(IFD_EFORMAT, "architectures");
    put("config.json", "{\"architectures\":[\"FalconForCausalLM\"]}");
    load_fails(IFD_ENOTSUP, "FalconForCausalLM");
    static const char *base = "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
                              "\"intermediate_size\":96,\"num_hidden_layers\":2,"
                              "\"num_attention_heads\":4,\"vocab_size\":100";
    char buf[1024];
    static const struct {
        const char *extra;
        int rc;
        const char *needle;
    } cases[] = {
        {",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}", IFD_ENOTSUP, "yarn"},
        {",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":0}", IFD_EFORMAT, "factor"},
        {",\"hidden_act\":\"gelu\"", IFD_ENOTSUP, "gelu"},
        {",\"mlp_bias\":true", IFD_ENOTSUP, "mlp_bias"},
        {",\"num_key_value_heads\":3", IFD_EFORMAT, "kv heads"},
        {",\"head_dim\":7", IFD_EFORMAT, "head_dim"},
        {",\"rms_norm_eps\":\"x\"", IFD_EFORMAT, "rms_norm_eps"},
        {",\"num_hidden_layers\":-1", IFD_EFORMAT, "num_hidden_layers"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(buf, sizeof buf, "%s%s}", base, cases[i].extra);
        put("config.json", buf);
        load_fails(cases[i].rc, cases[i].needle);
    }
    snprintf(buf, sizeof buf, "%s}", base);
    put("config.json", buf);
    put("generation_config.json", "{\"eos_token_id\": \"x\"}");
    load_fails(IFD_EFORMAT, "generation_config.json");
    put("generation_config.json", "{\"eos_token_id\": 5");
    load_fails(IFD_EFORMAT, "generation_config.json");
    put("generation_config.json", "{\"eos_token_id\": 5}");
    ifd_model_config_t c;
    load_ok(&c);
    ck_assert_uint_eq(c.gen.n_eos, 1);
    ck_assert_int_eq(c.gen.eos_ids[0], 5);
    ck_assert(!c.gen.do_sample);
    ck_assert(c.gen.min_p < 0 && c.gen.repetition_penalty < 0 && c.gen.max_new_tokens == 0);
    put("generation_config.json", "{\"min_p\": 0.05, \"repetition_penalty\": 1.1, "
                                  "\"max_new_tokens\": 2048, \"top_k\": 64}");
    load_ok(&c);
    ck_assert(fabsf(c.gen.min_p - 0.05f) < 1e-7f && fabsf(c.gen.repetition_penalty - 1.1f) < 1e-6f);
    ck_assert_int_eq(c.gen.max_new_tokens, 2048);
    ck_assert_int_eq(c.gen.top_k, 64);
    ck_assert(c.gen.temperature < 0 && c.gen.top_p < 0);
    put("generation_config.json", "{\"repetition_penalty\": \"high\"}");
    load_fails(IFD_EFORMAT, "repetition_penalty");
    put("generation_config.json", "{}");
    put("config.json",
        "{\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":64,"
        "\"intermediate_size\":96,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
        "\"vocab_size\":100,\"use_sliding_window\":true}");
    /* transformers' defaults: window 4096 from layer 28 on, so none of these 2 */
    load_ok(&c);
    ck_assert_uint_eq(c.sliding_window, 4096);
    ck_assert(!c.layer_is_local[0] && !c.layer_is_local[1]);
    static const char qwen_swa[] =
        "{\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":64,"
        "\"intermediate_size\":96,\"num_hidden_layers\":3,\"num_attention_heads\":4,"
        "\"vocab_size\":100,\"use_sliding_window\":true,";
    snprintf(buf, sizeof buf, "%s\"sliding_window\":8,\"max_window_layers\":1}", qwen_swa);
    put("config.json", buf);
    load_ok(&c);
    ck_assert_uint_eq(c.sliding_window, 8);
    ck_assert(!c.layer_is_local[0] && c.layer_is_local[1] && c.layer_is_local[2]);
    snprintf(buf, sizeof buf, "%s\"sliding_window\":8,\"max_window_layers\":1,"
             "\"layer_types\":[\"sliding_attention\",\"full_attention\",\"full_attention\"]}",
             qwen_swa);
    put("config.json", buf);
    load_ok(&c);
    ck_assert(c.layer_is_local[0] && !c.layer_is_local[1] && !c.layer_is_local[2]);
    snprintf(buf, sizeof buf, "%s\"sliding_window\":null,\"max_window_layers\":0}", qwen_swa);
    put("config.json", buf);
    load_ok(&c);
    ck_assert(c.sliding_window == 0 && !c.layer_is_local[0]);
    snprintf(buf, sizeof buf, "%s\"sliding_window\":8,\"layer_types\":[\"full_attention\"]}",
             qwen_swa);
    put("config.json", buf);
    load_fails(IFD_EFORMAT, "layer_types has 1 entries for 3 layers");
}
END_TEST

/* The KV geometry split of a model with local and global layers (the
 * local layers' own pool, docs/models.md); one pool otherwise. */
START_TEST(test_kvpool_params_split)
{
    ifd_model_config_t c;
    memset(&c, 0, sizeof c);
    c.n_layer = 6;
    c.n_head_kv = 1;
    c.head_dim = 256;
    ifd_kvpool_params_t g, l;
    ck_assert(!ifd_kvpool_model_params_split(&c, &g, &l)); /* no window: one pool */
    ck_assert_int_eq(g.n_layers, 6);
    for (int i = 0; i < 6; i++)
        c.layer_is_local[i] = i % 6 != 5; /* Gemma 3: five local per global */
    ck_assert(!ifd_kvpool_model_params_split(&c, &g, &l)); /* still no window */
    ck_assert_int_eq(ifd_model_n_local_layers(&c), 0);
    c.sliding_window = 512;
    ck_assert_int_eq(ifd_model_n_local_layers(&c), 5);
    ck_assert(ifd_kvpool_model_params_split(&c, &g, &l));
    ck_assert_int_eq(g.n_layers, 1);
    ck_assert_int_eq(l.n_layers, 5);
    ck_assert_int_eq(l.head_dim, 256);
    ck_assert_int_eq(l.n_kv_heads, 1);
    for (int i = 0; i < 6; i++)
        c.layer_is_local[i] = true; /* Mistral: every layer local, one pool */
    ck_assert(!ifd_kvpool_model_params_split(&c, &g, &l));
    ck_assert_int_eq(g.n_layers, 6);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model_config");
    TCase *tc = ifd_test_case(s, "hf", 0,
                              IFD_TESTS(test_llama32, test_gemma3_4b_text_config,
                                        test_gemma3_layer_types_and_rope_parameters,
                                        test_qwen_mistral, test_errors, test_kvpool_params_split));
    tcase_add_checked_fixture(tc, setup, teardown);
    return ifd_test_run(s);
}
