/*
 * model_source.c — GGUF files and Hugging Face directories behind one
 * tensor lookup (see model_source.h).
 *
 * HF names are derived from the GGUF name on each lookup through two small
 * tables (global tensors, per-layer suffixes); the checkpoint's text prefix
 * ("model.", "language_model.model.", "model.language_model.") is found once
 * at open from where the token embedding is.
 */
#include "model_source.h"
#include "error.h"
#include "log.h"
#include "safetensors.h"
#include "vision_config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct ifd_model_source {
    ifd_model_format_t format;
    char *path;
    ifd_model_config_t cfg;
    ifd_gguf_t *gguf;      /* GGUF */
    ifd_safetensors_t *st; /* HF */
    char prefix[64];       /* HF: prefix of the text model's tensors ("model.") */
    char lm_head[96];      /* HF: the output projection's name, "" when absent */
    float *rope_freqs;     /* HF llama3: n_rot / 2 synthesized factors */
    /* HF Gemma 3 with a vision tower: its config and tensor prefixes */
    bool has_vision;
    ifd_vision_config_t vision;
    char vision_why[1024]; /* why a vision_config present is not usable, or "" */
    char vprefix[64];     /* "vision_tower.vision_model." or another spelling */
    char pprefix[64];     /* "multi_modal_projector." or "model.multi_modal_projector." */
};

/* llama.cpp mmproj names (GGUF) → HF names of the tower (after vprefix; per
 * layer after "encoder.layers.N.") and of the projector (after pprefix). */
typedef struct {
    const char *gguf;
    const char *hf;
} ifd__name_pair_t;

static const ifd__name_pair_t ifd__vision_names[] = {
    {"v.patch_embd", "embeddings.patch_embedding"},
    {"v.position_embd", "embeddings.position_embedding"},
    {"v.post_ln", "post_layernorm"},
};
static const ifd__name_pair_t ifd__vision_layer_names[] = {
    {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"}, {"attn_out", "self_attn.out_proj"},
    {"ln1", "layer_norm1"},         {"ln2", "layer_norm2"},
    {"ffn_up", "mlp.fc1"},          {"ffn_down", "mlp.fc2"},
};
static const ifd__name_pair_t ifd__proj_names[] = {
    {"mm.soft_emb_norm.weight", "mm_soft_emb_norm.weight"},
    {"mm.input_projection.weight", "mm_input_projection_weight"},
};

/* The HF name of a vision tensor (GGUF mmproj name), or false. */
static bool ifd__hf_vision_name(const ifd_model_source_t *s, const char *gguf, char *out,
                                size_t len)
{
    if (!s->has_vision)
        return false;
    for (size_t i = 0; i < sizeof ifd__proj_names / sizeof ifd__proj_names[0]; i++)
        if (strcmp(gguf, ifd__proj_names[i].gguf) == 0) {
            snprintf(out, len, "%s%s", s->pprefix, ifd__proj_names[i].hf);
            return true;
        }
    const char *dot = strrchr(gguf, '.');
    if (!dot || (strcmp(dot, ".weight") != 0 && strcmp(dot, ".bias") != 0))
        return false;
    const size_t base = (size_t)(dot - gguf);
    for (size_t i = 0; i < sizeof ifd__vision_names / sizeof ifd__vision_names[0]; i++)
        if (strlen(ifd__vision_names[i].gguf) == base &&
            strncmp(gguf, ifd__vision_names[i].gguf, base) == 0) {
            snprintf(out, len, "%s%s%s", s->vprefix, ifd__vision_names[i].hf, dot);
            return true;
        }
    unsigned layer;
    int n = 0;
    if (sscanf(gguf, "v.blk.%u.%n", &layer, &n) != 1 || n == 0)
        return false;
    const char *rest = gguf + n;
    for (size_t i = 0; i < sizeof ifd__vision_layer_names / sizeof ifd__vision_layer_names[0]; i++)
        if ((size_t)(dot - rest) == strlen(ifd__vision_layer_names[i].gguf) &&
            strncmp(rest, ifd__vision_layer_names[i].gguf, (size_t)(dot - rest)) == 0) {
            snprintf(out, len, "%sencoder.layers.%u.%s%s", s->vprefix, layer,
                     ifd__vision_layer_names[i].hf, dot);
            return true;
        }
    return false;
}

/* GGUF layer suffix → HF suffix (after "layers.N."); per architecture where they differ. */
static const struct {
    const char *gguf;
    const char *hf;       /* llama, mistral, qwen2, qwen3 */
    const char *hf_gemma; /* gemma3; NULL: the same as hf */
} ifd__layer_names[] = {
    {"attn_norm", "input_layernorm", NULL},
    {"attn_q", "self_attn.q_proj", NULL},
    {"attn_k", "self_attn.k_proj", NULL},
    {"attn_v", "self_attn.v_proj", NULL},
    {"attn_output", "self_attn.o_proj", NULL},
    {"attn_q_norm", "self_attn.q_norm", NULL},
    {"attn_k_norm", "self_attn.k_norm", NULL},
    {"ffn_norm", "post_attention_layernorm", "pre_feedforward_layernorm"},
    {"post_attention_norm", NULL, "post_attention_layernorm"},
    {"post_ffw_norm", NULL, "post_feedforward_layernorm"},
    {"ffn_gate", "mlp.gate_proj", NULL},
    {"ffn_up", "mlp.up_proj", NULL},
    {"ffn_down", "mlp.down_proj", NULL},
};

/* Maps a GGUF tensor name onto the checkpoint's name. false when the
 * architecture has no such tensor. */
static bool ifd__hf_name(const ifd_model_source_t *s, const char *gguf, char *out, size_t len)
{
    const bool gemma = s->cfg.arch == IFD_ARCH_GEMMA3;
    if (strncmp(gguf, "v.", 2) == 0 || strncmp(gguf, "mm.", 3) == 0)
        return ifd__hf_vision_name(s, gguf, out, len);
    if (strcmp(gguf, "token_embd.weight") == 0) {
        snprintf(out, len, "%sembed_tokens.weight", s->prefix);
        return true;
    }
    if (strcmp(gguf, "output_norm.weight") == 0) {
        snprintf(out, len, "%snorm.weight", s->prefix);
        return true;
    }
    unsigned layer;
    int n = 0;
    if (sscanf(gguf, "blk.%u.%n", &layer, &n) != 1 || n == 0)
        return false;
    const char *rest = gguf + n;
    const char *dot = strrchr(rest, '.');
    if (!dot || (strcmp(dot, ".weight") != 0 && strcmp(dot, ".bias") != 0))
        return false;
    size_t base = (size_t)(dot - rest);
    for (size_t i = 0; i < sizeof ifd__layer_names / sizeof ifd__layer_names[0]; i++) {
        const char *g = ifd__layer_names[i].gguf;
        if (strlen(g) != base || strncmp(rest, g, base) != 0)
            continue;
        const char *hf = gemma && ifd__layer_names[i].hf_gemma ? ifd__layer_names[i].hf_gemma
                                                               : ifd__layer_names[i].hf;
        if (!hf)
            return false;
        snprintf(out, len, "%slayers.%u.%s%s", s->prefix, layer, hf, dot);
        return true;
    }
    return false;
}

static void ifd__view_gguf(const ifd_model_source_t *s, const ifd_gguf_tensor_t *t,
                           ifd_tensor_view_t *v)
{
    memset(v, 0, sizeof *v);
    v->name = t->name;
    v->file = ifd_gguf_path(s->gguf);
    v->ggml_type = (uint32_t)t->type;
    v->n_dims = t->n_dims;
    for (int d = 0; d < 4; d++)
        v->ne[d] = d < IFD_GGUF_MAX_DIMS ? t->ne[d] : 1;
    v->data = t->data;
    v->nbytes = t->nbytes;
}

static int ifd__view_st(const ifd_st_tensor_t *t, bool gemma, ifd_tensor_view_t *v)
{
    memset(v, 0, sizeof *v);
    if (t->n_dims > 4)
        return IFD_ENOTSUP;
    v->name = t->name;
    v->file = t->file;
    v->ggml_type = t->ggml_type;
    v->dtype = t->dtype;
    v->n_dims = t->n_dims;
    for (int d = 0; d < 4; d++)
        v->ne[d] = (uint32_t)d < t->n_dims ? (uint64_t)t->shape[t->n_dims - 1 - d] : 1;
    v->data = t->data;
    v->nbytes = t->nbytes;
    size_t n = strlen(t->name);
    v->add_one = gemma && n >= 11 && strcmp(t->name + n - 11, "norm.weight") == 0;
    return 0;
}

int ifd_model_source_find(const ifd_model_source_t *s, const char *gguf_name,
                          ifd_tensor_view_t *out)
{
    if (s->format == IFD_FORMAT_GGUF) {
        const ifd_gguf_tensor_t *t = ifd_gguf_find_tensor(s->gguf, gguf_name);
        if (!t)
            return IFD_ENOTFOUND;
        ifd__view_gguf(s, t, out);
        return 0;
    }
    if (strcmp(gguf_name, "rope_freqs.weight") == 0) {
        if (!s->rope_freqs)
            return IFD_ENOTFOUND;
        memset(out, 0, sizeof *out);
        out->name = "rope_freqs.weight (from rope_scaling)";
        out->file = s->path;
        out->ggml_type = 0; /* F32 */
        out->n_dims = 1;
        out->ne[0] = s->cfg.n_rot / 2;
        out->ne[1] = out->ne[2] = out->ne[3] = 1;
        out->data = s->rope_freqs;
        out->nbytes = out->ne[0] * sizeof(float);
        return 0;
    }
    char name[256];
    if (strcmp(gguf_name, "output.weight") == 0) {
        if (s->cfg.tied_embeddings || !s->lm_head[0])
            return IFD_ENOTFOUND;
        snprintf(name, sizeof name, "%s", s->lm_head);
    } else if (!ifd__hf_name(s, gguf_name, name, sizeof name)) {
        return IFD_ENOTFOUND;
    }
    const ifd_st_tensor_t *t = ifd_safetensors_find(s->st, name);
    if (!t || ifd__view_st(t, s->cfg.arch == IFD_ARCH_GEMMA3, out) != 0)
        return IFD_ENOTFOUND;
    if (strncmp(gguf_name, "v.", 2) == 0) /* LayerNorms: w as stored */
        out->add_one = false;
    return 0;
}

void ifd_model_source_name(const ifd_model_source_t *s, const char *gguf_name, char *buf,
                           size_t len)
{
    if (s->format == IFD_FORMAT_HF && strcmp(gguf_name, "output.weight") == 0)
        snprintf(buf, len, "%s", s->lm_head[0] ? s->lm_head : "lm_head.weight");
    else if (s->format != IFD_FORMAT_HF || !ifd__hf_name(s, gguf_name, buf, len))
        snprintf(buf, len, "%s", gguf_name);
}

void ifd_model_source_release(const ifd_model_source_t *s, const char *gguf_name)
{
    if (!s)
        return;
    if (s->gguf) {
        ifd_gguf_release_tensor(s->gguf, ifd_gguf_find_tensor(s->gguf, gguf_name));
        return;
    }
    char name[256];
    if (strcmp(gguf_name, "output.weight") == 0)
        snprintf(name, sizeof name, "%s", s->lm_head);
    else if (!ifd__hf_name(s, gguf_name, name, sizeof name))
        return;
    ifd_safetensors_release(s->st, ifd_safetensors_find(s->st, name));
}

void ifd_model_source_release_all(const ifd_model_source_t *s)
{
    if (s && s->gguf)
        ifd_gguf_release_tensor_pages(s->gguf);
    else if (s)
        ifd_safetensors_release_all(s->st);
}

static bool ifd__is_gguf_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    char m[4];
    bool yes = fread(m, 1, 4, f) == 4 && memcmp(m, "GGUF", 4) == 0;
    fclose(f);
    return yes;
}

/* A vision_config's tower: its config and where its tensors are. Not
 * usable (unsupported, malformed, tensors missing): has_vision false and the
 * reason in vision_why — the text model still serves (a checkpoint's vision
 * part never stops its text model from loading). */
static void ifd__open_vision(ifd_model_source_t *s, const char *dir)
{
    int rc = ifd_vision_config_from_hf(&s->vision, dir, s->vision_why, sizeof s->vision_why);
    if (rc == IFD_ENOTFOUND)
        s->vision_why[0] = '\0';
    if (rc)
        return;
    static const char *const vp[] = {"vision_tower.vision_model.",
                                     "model.vision_tower.vision_model.", "vision_tower.",
                                     "model.vision_tower."};
    static const char *const pp[] = {"multi_modal_projector.", "model.multi_modal_projector."};
    for (size_t i = 0; i < sizeof vp / sizeof vp[0] && !s->vprefix[0]; i++) {
        char n[128];
        snprintf(n, sizeof n, "%sembeddings.patch_embedding.weight", vp[i]);
        if (ifd_safetensors_find(s->st, n))
            snprintf(s->vprefix, sizeof s->vprefix, "%s", vp[i]);
    }
    for (size_t i = 0; i < sizeof pp / sizeof pp[0] && !s->pprefix[0]; i++) {
        char n[128];
        snprintf(n, sizeof n, "%smm_input_projection_weight", pp[i]);
        if (ifd_safetensors_find(s->st, n))
            snprintf(s->pprefix, sizeof s->pprefix, "%s", pp[i]);
    }
    if (!s->vprefix[0] || !s->pprefix[0])
        snprintf(s->vision_why, sizeof s->vision_why,
                 "%.700s: config.json has a vision_config but tensor %s is missing", dir,
                 !s->vprefix[0] ? "vision_tower.vision_model.embeddings.patch_embedding.weight"
                                : "multi_modal_projector.mm_input_projection_weight");
    else
        s->has_vision = true;
}

/* The HF side of open: config, shards, prefix, tied/untied output, rope factors. */
static int ifd__open_hf(ifd_model_source_t *s, const char *dir, char *errbuf, size_t errlen)
{
    int rc = ifd_model_config_from_hf(&s->cfg, dir, errbuf, errlen);
    if (rc)
        return rc;
    if ((rc = ifd_safetensors_open(&s->st, dir, errbuf, errlen)))
        return rc;
    static const char *const prefixes[] = {"model.", "language_model.model.",
                                           "model.language_model."};
    const ifd_st_tensor_t *emb = NULL;
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0] && !emb; i++) {
        char n[128];
        snprintf(n, sizeof n, "%sembed_tokens.weight", prefixes[i]);
        if ((emb = ifd_safetensors_find(s->st, n)))
            snprintf(s->prefix, sizeof s->prefix, "%s", prefixes[i]);
    }
    if (!emb)
        return ifd_fail_msg(errbuf, errlen, IFD_EFORMAT,
                            "%s: tensor model.embed_tokens.weight is missing (from every "
                            "shard)",
                            dir);
    if (emb->n_dims != 2 || emb->shape[1] != (int64_t)s->cfg.n_embd ||
        emb->shape[0] != (int64_t)s->cfg.n_vocab)
        return ifd_fail_msg(errbuf, errlen, IFD_EFORMAT,
                            "%s: tensor '%s' has shape [%lld, %lld], config.json says "
                            "[vocab_size %u, hidden_size %u]",
                            emb->file, emb->name, (long long)emb->shape[0],
                            (long long)(emb->n_dims > 1 ? emb->shape[1] : 0), s->cfg.n_vocab,
                            s->cfg.n_embd);
    static const char *const heads[] = {"lm_head.weight", "language_model.lm_head.weight"};
    for (size_t i = 0; i < sizeof heads / sizeof heads[0] && !s->lm_head[0]; i++)
        if (ifd_safetensors_find(s->st, heads[i]))
            snprintf(s->lm_head, sizeof s->lm_head, "%s", heads[i]);
    if (!s->cfg.tied_embeddings && !s->lm_head[0])
        return ifd_fail_msg(errbuf, errlen, IFD_EFORMAT,
                            "%s: tensor lm_head.weight is missing and tie_word_embeddings is "
                            "false",
                            dir);
    if (s->cfg.has_rope_freqs) {
        if (!(s->rope_freqs = malloc(s->cfg.n_rot / 2 * sizeof(float))))
            return IFD_ENOMEM;
        ifd_model_config_rope_factors(&s->cfg, s->rope_freqs);
    }
    if (s->cfg.arch == IFD_ARCH_GEMMA3)
        ifd__open_vision(s, dir);
    return 0;
}

int ifd_model_source_open(ifd_model_source_t **out, const char *path, char *errbuf, size_t errlen)
{
    ifd_model_source_t *s = calloc(1, sizeof *s);
    if (!s)
        return IFD_ENOMEM;
    int rc;
    struct stat sb;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    size_t n = strlen(dir);
    if (n > 12 && strcmp(dir + n - 12, "/config.json") == 0)
        dir[n - 12] = '\0';
    if (!(s->path = strdup(dir))) {
        free(s);
        return IFD_ENOMEM;
    }
    if (stat(dir, &sb) != 0) {
        rc = -errno;
        ifd_fail_msg(errbuf, errlen, rc, "%s: %s", dir, strerror(errno));
    } else if (S_ISDIR(sb.st_mode)) {
        char cj[4200];
        snprintf(cj, sizeof cj, "%s/config.json", dir);
        s->format = IFD_FORMAT_HF;
        if (access(cj, F_OK) != 0)
            rc = ifd_fail_msg(errbuf, errlen, IFD_ENOTSUP,
                              "%s: a directory without config.json: not a Hugging Face model "
                              "directory (give a .gguf file or a directory with config.json "
                              "and *.safetensors)",
                              dir);
        else
            rc = ifd__open_hf(s, dir, errbuf, errlen);
    } else if (!ifd__is_gguf_file(dir)) {
        rc = ifd_fail_msg(errbuf, errlen, IFD_EFORMAT,
                          "%s: neither a GGUF file (no GGUF magic) nor a Hugging Face model "
                          "directory",
                          dir);
    } else {
        s->format = IFD_FORMAT_GGUF;
        rc = ifd_gguf_open(&s->gguf, dir, errbuf, errlen);
        if (rc == 0)
            rc = ifd_model_config_from_gguf(&s->cfg, s->gguf, errbuf, errlen);
    }
    if (rc == IFD_ENOMEM)
        ifd_fail_msg(errbuf, errlen, rc, "%s: out of memory", dir);
    if (rc) {
        ifd_model_source_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

void ifd_model_source_close(ifd_model_source_t *s)
{
    if (!s)
        return;
    ifd_gguf_close(s->gguf);
    ifd_safetensors_close(s->st);
    free(s->rope_freqs);
    free(s->path);
    free(s);
}

const ifd_model_config_t *ifd_model_source_config(const ifd_model_source_t *s)
{
    return &s->cfg;
}

const char *ifd_model_source_path(const ifd_model_source_t *s)
{
    return s->path;
}

const ifd_gguf_t *ifd_model_source_gguf(const ifd_model_source_t *s)
{
    return s->gguf;
}

const struct ifd_safetensors *ifd_model_source_safetensors(const ifd_model_source_t *s)
{
    return s->st;
}

uint64_t ifd_model_source_bytes(const ifd_model_source_t *s)
{
    return s->gguf ? ifd_gguf_file_size(s->gguf) : ifd_safetensors_total_bytes(s->st);
}

size_t ifd_model_source_n_files(const ifd_model_source_t *s)
{
    return s->gguf ? 1 : ifd_safetensors_n_files(s->st);
}

const ifd_vision_config_t *ifd_model_source_vision(const ifd_model_source_t *s, const char **why)
{
    if (why)
        *why = s->vision_why[0] ? s->vision_why : NULL;
    return s->has_vision ? &s->vision : NULL;
}

int ifd_model_source_open_mmproj(ifd_model_source_t **out, const char *path, char *errbuf,
                                 size_t errlen)
{
    ifd_model_source_t *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return ifd_fail_msg(errbuf, errlen, IFD_ENOMEM, "%s: out of memory", path);
    }
    s->format = IFD_FORMAT_GGUF;
    s->cfg.format = IFD_FORMAT_GGUF;
    int rc = ifd__is_gguf_file(path) ? ifd_gguf_open(&s->gguf, path, errbuf, errlen)
                                     : ifd_fail_msg(errbuf, errlen, IFD_EFORMAT,
                                                    "%s: not a GGUF file (no GGUF magic)", path);
    if (rc == 0) {
        rc = ifd_vision_config_from_gguf(&s->vision, s->gguf, errbuf, errlen);
        if (rc == IFD_ENOTFOUND)
            rc = ifd_fail_msg(errbuf, errlen, IFD_EFORMAT,
                              "%s: not an mmproj (general.architecture is not \"clip\")", path);
    }
    if (rc) {
        ifd_model_source_close(s);
        return rc;
    }
    s->has_vision = true;
    *out = s;
    return 0;
}
