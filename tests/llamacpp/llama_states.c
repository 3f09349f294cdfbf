// Real llama.cpp (the libllama of node-llama-cpp 3.21.1, tag v0.4.0) writing the state variants
// kvtool reads (formats/llama-state.md): models of the architectures that write them, made from
// metadata alone with random weights as llama.cpp's tests/test-llama-archs.cpp makes them
// (llama_model_init_from_user) and saved with llama_model_save_to_file; and, for any model, a
// sequence file, a session file, and the in-memory blobs of llama_state_seq_get_data(_ext).
// Built by tests/llamacpp/test_state_variants.sh against the bundle's headers.
//
//   llama_states BINS_DIR model ARCH OUT.gguf        ARCH: qwen2vl (M-RoPE cells), gemma2 (sliding
//                                                    window), lfm2 (attention + recurrent)
//   llama_states BINS_DIR save MODEL.gguf N OUTDIR   decodes N tokens in sequence 0 and N/2 others in
//       sequence 1 (two streams: n_seq_max 2, kv_unified off) and writes OUTDIR/seq.ggsq (sequence
//       0), OUTDIR/session.ggsn (both), OUTDIR/seq.blob and OUTDIR/seq1.blob (llama_state_seq_get_data
//       of sequences 0 and 1), OUTDIR/partial.blob (sequence 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY),
//       OUTDIR/tokens.json and OUTDIR/tokens1.json
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "gguf.h"
#include "llama.h"

static int fail(const char* what) {
  fprintf(stderr, "llama_states: %s\n", what);
  return 1;
}

// N(0, 0.02) from a 64-bit generator seeded by the tensor's name: the same model every run.
static void fill(struct ggml_tensor* t, void* ud) {
  (void)ud;
  uint64_t s = 1469598103934665603ull;
  for (const char* p = t->name; *p; ++p) s = (s ^ (uint8_t)*p) * 1099511628211ull;
  const int64_t n = ggml_nelements(t);
  float* v = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i += 2) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u1 = ((s >> 11) + 1.0) / 9007199254740993.0;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u2 = (s >> 11) / 9007199254740992.0;
    const double r = sqrt(-2.0 * log(u1)) * 0.02;
    v[i] = (float)(r * cos(6.283185307179586 * u2));
    if (i + 1 < n) v[i + 1] = (float)(r * sin(6.283185307179586 * u2));
  }
  if (t->type == GGML_TYPE_F32) {
    ggml_backend_tensor_set(t, v, 0, ggml_nbytes(t));
  } else {  // F16 (the arch's convention for a few tensors)
    ggml_fp16_t* h = malloc(sizeof(ggml_fp16_t) * (size_t)n);
    for (int64_t i = 0; i < n; ++i) h[i] = ggml_fp32_to_fp16(v[i]);
    ggml_backend_tensor_set(t, h, 0, ggml_nbytes(t));
    free(h);
  }
  free(v);
}

static void kv_u32(struct gguf_context* g, const char* arch, const char* key, uint32_t v) {
  char k[128];
  snprintf(k, sizeof k, "%s.%s", arch, key);
  gguf_set_val_u32(g, k, v);
}

static void kv_f32(struct gguf_context* g, const char* arch, const char* key, float v) {
  char k[128];
  snprintf(k, sizeof k, "%s.%s", arch, key);
  gguf_set_val_f32(g, k, v);
}

static void kv_arr(struct gguf_context* g, const char* arch, const char* key, const uint32_t* v, size_t n) {
  char k[128];
  snprintf(k, sizeof k, "%s.%s", arch, key);
  gguf_set_arr_data(g, k, GGUF_TYPE_UINT32, v, n);
}

// The metadata test-llama-archs.cpp gives these architectures (get_gguf_ctx), at head_dim 64:
// 2 layers (lfm2: layer 1 recurrent), 2 heads, a sliding window of 32 with pattern 2 (gemma2: layer 0
// sliding, layer 1 full), M-RoPE sections of head_dim / 4 (qwen2vl).
static struct gguf_context* metadata(const char* arch) {
  const uint32_t n_embd = 128, n_head = 2, n_layer = 2, hd = n_embd / n_head;
  struct gguf_context* g = gguf_init_empty();
  gguf_set_val_str(g, "general.architecture", arch);
  gguf_set_val_str(g, "tokenizer.ggml.model", "no_vocab");
  kv_u32(g, arch, "vocab_size", 128);
  kv_u32(g, arch, "context_length", 256);
  kv_u32(g, arch, "embedding_length", n_embd);
  kv_u32(g, arch, "block_count", n_layer);
  kv_u32(g, arch, "feed_forward_length", 192);
  kv_f32(g, arch, "attention.layer_norm_rms_epsilon", 1e-5f);
  kv_f32(g, arch, "attention.layer_norm_epsilon", 1e-5f);
  kv_f32(g, arch, "rope.freq_base", 10000.0f);
  if (!strcmp(arch, "lfm2")) {
    const uint32_t heads[2] = {n_head, 0};
    kv_arr(g, arch, "attention.head_count", heads, 2);
    kv_arr(g, arch, "attention.head_count_kv", heads, 2);
    kv_u32(g, arch, "shortconv.l_cache", 3);
  } else {
    kv_u32(g, arch, "attention.head_count", n_head);
    kv_u32(g, arch, "attention.head_count_kv", n_head);
  }
  if (!strcmp(arch, "gemma2")) {
    kv_u32(g, arch, "attention.sliding_window", 32);
    kv_u32(g, arch, "attention.sliding_window_pattern", 2);
  }
  if (!strcmp(arch, "qwen2vl")) {
    const uint32_t sections[4] = {hd / 4, hd / 4, hd / 4, hd / 4};
    kv_arr(g, arch, "rope.dimension_sections", sections, 4);
  }
  return g;
}

static int make_model(const char* arch, const char* out) {
  struct gguf_context* g = metadata(arch);
  struct llama_model_params mp = llama_model_default_params();
  struct llama_model* m = llama_model_init_from_user(g, fill, NULL, mp);
  if (!m) return fail("llama_model_init_from_user failed");
  llama_model_save_to_file(m, out);
  llama_model_free(m);
  gguf_free(g);
  return 0;
}

static int write_file(const char* dir, const char* name, const void* data, size_t n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) return fail("cannot write an output file");
  return 0;
}

static int write_blob(struct llama_context* ctx, const char* dir, const char* name, llama_seq_id seq,
                      llama_state_seq_flags flags) {
  const size_t n = llama_state_seq_get_size_ext(ctx, seq, flags);
  uint8_t* buf = malloc(n);
  const size_t got = llama_state_seq_get_data_ext(ctx, buf, n, seq, flags);
  const int rc = got == n ? write_file(dir, name, buf, n) : fail("llama_state_seq_get_data_ext failed");
  free(buf);
  return rc;
}

static int write_tokens(const char* dir, const char* name, const llama_token* tok, int n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "w");
  if (!f) return fail("cannot write a token list");
  for (int i = 0; i < n; ++i) fprintf(f, "%s%d", i ? ", " : "[", tok[i]);
  fprintf(f, "]\n");
  return fclose(f) == 0 ? 0 : fail("cannot write a token list");
}

// Decodes `n` tokens at positions 0..n-1 of sequence `seq`.
static int decode(struct llama_context* ctx, const llama_token* tok, int n, llama_seq_id seq) {
  struct llama_batch b = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    b.token[i] = tok[i], b.pos[i] = i, b.n_seq_id[i] = 1, b.seq_id[i][0] = seq, b.logits[i] = i == n - 1;
  }
  b.n_tokens = n;
  const int rc = llama_decode(ctx, b);
  llama_batch_free(b);
  return rc == 0 ? 0 : fail("llama_decode failed");
}

static int save_states(const char* model_path, int n, const char* dir) {
  struct llama_model_params mp = llama_model_default_params();
  struct llama_model* m = llama_model_load_from_file(model_path, mp);
  if (!m) return fail("cannot load the model");
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512, cp.n_batch = 256, cp.n_ubatch = 256, cp.n_seq_max = 2, cp.n_threads = 1, cp.n_threads_batch = 1;
  cp.swa_full = false;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  struct llama_context* ctx = llama_init_from_model(m, cp);
  if (!ctx) return fail("cannot create a context");
  llama_token* tok = malloc(sizeof(llama_token) * (size_t)n);
  llama_token* tok1 = malloc(sizeof(llama_token) * (size_t)n);
  const int32_t vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
  for (int i = 0; i < n; ++i) tok[i] = 1 + (i * 7) % (vocab - 1), tok1[i] = 1 + (i * 5 + 3) % (vocab - 1);
  if (decode(ctx, tok, n, 0) || decode(ctx, tok1, n / 2, 1)) return 1;
  char path[1024];
  snprintf(path, sizeof path, "%s/seq.ggsq", dir);
  if (!llama_state_seq_save_file(ctx, path, 0, tok, (size_t)n)) return fail("llama_state_seq_save_file failed");
  snprintf(path, sizeof path, "%s/session.ggsn", dir);
  if (!llama_state_save_file(ctx, path, tok, (size_t)n)) return fail("llama_state_save_file failed");
  if (write_blob(ctx, dir, "seq.blob", 0, 0) || write_blob(ctx, dir, "seq1.blob", 1, 0) ||
      write_blob(ctx, dir, "partial.blob", 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY))
    return 1;
  if (write_tokens(dir, "tokens.json", tok, n) || write_tokens(dir, "tokens1.json", tok1, n / 2)) return 1;
  free(tok1);
  free(tok);
  llama_free(ctx);
  llama_model_free(m);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 5) return fail("usage: llama_states BINS_DIR model ARCH OUT.gguf | BINS_DIR save MODEL.gguf N OUTDIR");
  ggml_backend_load_all_from_path(argv[1]);
  llama_backend_init();
  if (!strcmp(argv[2], "model")) return make_model(argv[3], argv[4]);
  if (!strcmp(argv[2], "save") && argc == 6) return save_states(argv[3], atoi(argv[4]), argv[5]);
  return fail("unknown command");
}
