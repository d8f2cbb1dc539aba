// mtmd_probe.cpp — llama.cpp's multimodal library (libmtmd) on one image, for comparing inferd's
// Gemma 3 vision path with llama.cpp's runtime on the same GGUF text model + mmproj
// (docs/vision.md "llama.cpp's runtime on the same files"; bench/vision_vs_mtmd.sh,
// tools/mtmd_check.py). Not part of inferd's build: it is compiled by those scripts against a
// llama.cpp build (LLAMA_BUILD_MTMD=ON), see bench/build_mtmd_probe.sh.
//
// Usage: mtmd_probe --model TEXT.gguf --mmproj MMPROJ.gguf [--threads N] [--no-flash]
//          (--image FILE... | --rgb FILE... --size S | --random | --text-only)
//          [--embd-out FILE] [--reps N]
//          [--prompt TEXT [-n N] [--logits-out FILE] [--all-logits-out FILE]]
//   --image   decoded and preprocessed by llama.cpp (stb_image, its resize for the projector);
//             repeated for several images (one marker each in --prompt)
//   --rgb     raw u8 RGB of S×S pixels (e.g. inferd's resized picture): at the mmproj's image
//             size llama.cpp copies it unchanged, so both engines see the same pixels
//   --text-only  no image (a --prompt without the marker)
//   --random  a random u8 picture of the mmproj's image size (timing)
//   --embd-out  the first image's embeddings (tokens × text width, f32, row-major) from one encode
//   --reps N    N timed encodes of the first image after one warm-up (median and minimum in ms)
//   --prompt    a prompt with the media marker <__media__> where the image goes (special tokens
//               parsed, BOS added by the vocab's rule); its chunks are evaluated with
//               mtmd_helper_eval_chunks and -n N tokens decoded greedily (argmax)
//   --logits-out  the last prompt position's logits (f32)
//   --all-logits-out  every prompt position's logits (positions × vocab, f32), from a separate
//               evaluation chunk by chunk (the KV cleared before the greedy run);
//               MTMD_PROBE_CAUSAL=1 makes the image tokens causal there (a control)
// → one JSON object on stdout: the prompt's ids (image tokens as -1), the generated ids, the
// encode times. Logs go to stderr.
#include "llama.h"
#include "mtmd-helper.h"
#include "mtmd.h"
#include "ggml-backend.h"
#include "ggml.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

static void die(const char *msg)
{
    fprintf(stderr, "mtmd_probe: %s\n", msg);
    exit(1);
}

static bool write_f32(const char *path, const float *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fwrite(p, sizeof(float), n, f) == n;
    return fclose(f) == 0 && ok;
}

static void quiet_log(ggml_log_level level, const char *text, void *)
{
    if (level >= GGML_LOG_LEVEL_WARN || getenv("MTMD_PROBE_VERBOSE"))
        fputs(text, stderr);
}

// MTMD_PROBE_DUMP=DIR: every F32 tensor clip's graph computes is written to DIR/NAME.f32
// (ne0 fastest), for locating a difference layer by layer.
static bool dump_cb(struct ggml_tensor *t, bool ask, void *ud)
{
    if (ask)
        return true;
    if (t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t) || !t->name[0])
        return true;
    std::string path = std::string((const char *)ud) + "/" + t->name + ".f32";
    std::vector<float> buf(ggml_nelements(t));
    ggml_backend_tensor_get(t, buf.data(), 0, ggml_nbytes(t));
    write_f32(path.c_str(), buf.data(), buf.size());
    return true;
}

int main(int argc, char **argv)
{
    const char *model_path = nullptr, *mmproj = nullptr;
    std::vector<const char *> images, rgbs;
    const char *embd_out = nullptr, *logits_out = nullptr, *all_logits_out = nullptr;
    const char *prompt = nullptr;
    int threads = 2, size = 0, reps = 0, n_predict = 8;
    bool random_img = false, no_flash = false, text_only = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto val = [&]() -> const char * {
            if (i + 1 >= argc)
                die(("missing value after " + a).c_str());
            return argv[++i];
        };
        if (a == "--model") model_path = val();
        else if (a == "--mmproj") mmproj = val();
        else if (a == "--image") images.push_back(val());
        else if (a == "--rgb") rgbs.push_back(val());
        else if (a == "--size") size = atoi(val());
        else if (a == "--random") random_img = true;
        else if (a == "--threads") threads = atoi(val());
        else if (a == "--embd-out") embd_out = val();
        else if (a == "--logits-out") logits_out = val();
        else if (a == "--all-logits-out") all_logits_out = val();
        else if (a == "--reps") reps = atoi(val());
        else if (a == "--prompt") prompt = val();
        else if (a == "-n") n_predict = atoi(val());
        else if (a == "--no-flash") no_flash = true;
        else if (a == "--text-only") text_only = true;
        else die(("unknown argument " + a).c_str());
    }
    if (!model_path || !mmproj || (!images.empty() + !rgbs.empty() + random_img + text_only) != 1 ||
        (!rgbs.empty() && size <= 0) || (text_only && (!prompt || embd_out || reps)))
        die("usage: mtmd_probe --model TEXT.gguf --mmproj MMPROJ.gguf (--image FILE | --rgb FILE "
            "--size S | --random | --text-only) [--threads N] [--no-flash] [--embd-out F] [--reps N] "
            "[--prompt TEXT [-n N] [--logits-out F]]");

    llama_log_set(quiet_log, nullptr);
    mtmd_helper_log_set(quiet_log, nullptr);
    llama_backend_init();
    ggml_backend_load_all();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model)
        die("cannot load the text model");
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.type_k = cp.type_v = GGML_TYPE_F32; // exact KV (inferd's tests use f32 KV too)
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context *lctx = llama_init_from_model(model, cp);
    if (!lctx)
        die("cannot create the llama context");

    mtmd_context_params mparams = mtmd_context_params_default();
    mparams.use_gpu = false;
    mparams.print_timings = false;
    mparams.n_threads = threads;
    mparams.warmup = false;
    mparams.flash_attn_type = no_flash ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
    if (const char *dump = getenv("MTMD_PROBE_DUMP")) {
        mparams.cb_eval = dump_cb;
        mparams.cb_eval_user_data = (void *)dump;
    }
    mtmd_context *mctx = mtmd_init_from_file(mmproj, model, mparams);
    if (!mctx)
        die("cannot load the mmproj");

    std::vector<mtmd_bitmap *> bmps;
    for (const char *image : images) {
        mtmd_helper_bitmap_wrapper w =
            mtmd_helper_bitmap_init_from_file(mctx, image, false, mtmd_helper_init_opt_default());
        if (!w.bitmap)
            die("cannot load an --image");
        bmps.push_back(w.bitmap);
    }
    for (const char *rgb : rgbs) {
        std::vector<unsigned char> px((size_t)size * size * 3);
        FILE *f = fopen(rgb, "rb");
        if (!f || fread(px.data(), 1, px.size(), f) != px.size())
            die("cannot read an --rgb file (S*S*3 bytes)");
        fclose(f);
        bmps.push_back(mtmd_bitmap_init((uint32_t)size, (uint32_t)size, px.data()));
    }
    if (random_img) {
        // any size is resized to the mmproj's; 896 (gemma-3-4b's) makes that a copy there
        size = 896;
        std::vector<unsigned char> px((size_t)size * size * 3);
        std::mt19937 g(42);
        for (auto &c : px)
            c = (unsigned char)(g() >> 24);
        bmps.push_back(mtmd_bitmap_init((uint32_t)size, (uint32_t)size, px.data()));
    }
    for (auto *b : bmps)
        if (!b)
            die("cannot make a bitmap");

    std::string text = prompt ? prompt : mtmd_default_marker();
    if (!prompt)
        for (size_t i = 1; i < bmps.size(); i++)
            text += mtmd_default_marker();
    mtmd_input_text it = {text.c_str(), text.size(), /*add_special*/ prompt != nullptr,
                          /*parse_special*/ true};
    mtmd_input_chunks *chunks = mtmd_input_chunks_init();
    std::vector<const mtmd_bitmap *> cb(bmps.begin(), bmps.end());
    if (mtmd_tokenize(mctx, chunks, &it, cb.data(), cb.size()) != 0)
        die("mtmd_tokenize failed");

    const mtmd_input_chunk *img_chunk = nullptr;
    std::vector<long> prompt_ids;
    for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
        const mtmd_input_chunk *c = mtmd_input_chunks_get(chunks, i);
        if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
            size_t n = 0;
            const llama_token *t = mtmd_input_chunk_get_tokens_text(c, &n);
            prompt_ids.insert(prompt_ids.end(), t, t + n);
        } else {
            if (!img_chunk)
                img_chunk = c; // the first image's: --embd-out and the timing
            prompt_ids.insert(prompt_ids.end(), mtmd_input_chunk_get_n_tokens(c), -1L);
        }
    }
    if (!img_chunk && !text_only)
        die("no image chunk");
    const int n_img = img_chunk ? (int)mtmd_input_chunk_get_n_tokens(img_chunk) : 0;
    const int n_embd = llama_model_n_embd_inp(model);

    // one encode for the embeddings, then reps timed ones
    std::vector<double> t_ms;
    const int n_enc = reps > 0 ? reps + 1 : (embd_out ? 1 : 0); // the first is the warm-up
    for (int r = 0; r < n_enc; r++) {
        auto t0 = std::chrono::steady_clock::now();
        if (mtmd_encode_chunk(mctx, img_chunk) != 0)
            die("mtmd_encode_chunk failed");
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (r == 0 && embd_out &&
            !write_f32(embd_out, mtmd_get_output_embd(mctx), (size_t)n_img * n_embd))
            die("cannot write --embd-out");
        if (r >= 1)
            t_ms.push_back(ms);
    }

    std::vector<long> gen;
    if (prompt && all_logits_out) {
        // chunk by chunk with logits at every position (image chunks as embeddings, with the
        // attention mtmd asks for: non-causal among an image's tokens for Gemma 3)
        const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
        std::vector<float> all;
        llama_pos n_past = 0;
        for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
            const mtmd_input_chunk *c = mtmd_input_chunks_get(chunks, i);
            const int n = (int)mtmd_input_chunk_get_n_tokens(c);
            const bool img = mtmd_input_chunk_get_type(c) != MTMD_INPUT_CHUNK_TYPE_TEXT;
            llama_batch b = llama_batch_init(n, img ? n_embd : 0, 1);
            const llama_token *toks = nullptr;
            if (img) {
                if (mtmd_encode_chunk(mctx, c) != 0)
                    die("mtmd_encode_chunk failed");
                memcpy(b.embd, mtmd_get_output_embd(mctx), sizeof(float) * (size_t)n * n_embd);
            } else {
                size_t nt = 0;
                toks = mtmd_input_chunk_get_tokens_text(c, &nt);
            }
            for (int k = 0; k < n; k++) {
                if (toks)
                    b.token[k] = toks[k];
                b.pos[k] = n_past + k;
                b.n_seq_id[k] = 1;
                b.seq_id[k][0] = 0;
                b.logits[k] = 1;
            }
            b.n_tokens = n;
            // MTMD_PROBE_CAUSAL=1: image tokens causal too (what a wrong mask would give)
            const bool nc = img && mtmd_decode_use_non_causal(mctx, c) && !getenv("MTMD_PROBE_CAUSAL");
            if (nc)
                llama_set_causal_attn(lctx, false);
            if (llama_decode(lctx, b) != 0)
                die("llama_decode failed");
            if (nc)
                llama_set_causal_attn(lctx, true);
            for (int k = 0; k < n; k++) {
                const float *lg = llama_get_logits_ith(lctx, k);
                all.insert(all.end(), lg, lg + n_vocab);
            }
            llama_batch_free(b);
            n_past += n;
        }
        if (!write_f32(all_logits_out, all.data(), all.size()))
            die("cannot write --all-logits-out");
        llama_memory_clear(llama_get_memory(lctx), true);
    }
    if (prompt) {
        llama_pos n_past = 0;
        if (mtmd_helper_eval_chunks(mctx, lctx, chunks, 0, 0, 512, true, &n_past) != 0)
            die("mtmd_helper_eval_chunks failed");
        const llama_vocab *vocab = llama_model_get_vocab(model);
        const int n_vocab = llama_vocab_n_tokens(vocab);
        for (int k = 0; k < n_predict; k++) {
            const float *lg = llama_get_logits_ith(lctx, -1);
            if (k == 0 && logits_out && !write_f32(logits_out, lg, (size_t)n_vocab))
                die("cannot write --logits-out");
            llama_token best = (llama_token)(std::max_element(lg, lg + n_vocab) - lg);
            gen.push_back(best);
            if (llama_vocab_is_eog(vocab, best))
                break;
            llama_batch b = llama_batch_get_one(&best, 1);
            if (llama_decode(lctx, b) != 0)
                die("llama_decode failed");
        }
    }

    printf("{\"tool\": \"mtmd_probe\", \"image_tokens\": %d, \"text_width\": %d, \"threads\": %d, "
           "\"flash_attn\": %s, \"prompt_ids\": [",
           n_img, n_embd, threads, no_flash ? "false" : "\"auto\"");
    for (size_t i = 0; i < prompt_ids.size(); i++)
        printf("%s%ld", i ? ", " : "", prompt_ids[i]);
    printf("], \"generated_ids\": [");
    for (size_t i = 0; i < gen.size(); i++)
        printf("%s%ld", i ? ", " : "", gen[i]);
    printf("]");
    if (!t_ms.empty()) {
        std::vector<double> s = t_ms;
        std::sort(s.begin(), s.end());
        printf(", \"reps\": %zu, \"encode_ms\": {\"median\": %.3f, \"min\": %.3f, \"all\": [", s.size(),
               s[s.size() / 2], s[0]);
        for (size_t i = 0; i < t_ms.size(); i++)
            printf("%s%.3f", i ? ", " : "", t_ms[i]);
        printf("]}");
    }
    printf("}\n");

    mtmd_input_chunks_free(chunks);
    for (auto *b : bmps)
        mtmd_bitmap_free(b);
    mtmd_free(mctx);
    llama_free(lctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
