// Real llama.cpp (the libllama of node-llama-cpp 3.21.1, tag v0.4.0) writing the state variants
// kvtool reads (formats/llama-state.md), for any model (tests/llamacpp/make_gguf_models.py writes
// the sliding-window, hybrid and M-RoPE ones): a sequence file, a session file, and the in-memory
// blobs of llama_state_seq_get_data(_ext). Built by tests/llamacpp/test_state_variants.sh against
// the bundle's headers.
//
//   llama_states BINS_DIR save MODEL.gguf N OUTDIR [q8_0]
//       decodes N tokens in sequence 0 and N/2 others in sequence 1 (two streams: n_seq_max 2,
//       kv_unified off) and writes OUTDIR/seq.ggsq (sequence 0), OUTDIR/session.ggsn (both),
//       OUTDIR/seq.blob and OUTDIR/seq1.blob (llama_state_seq_get_data of sequences 0 and 1),
//       OUTDIR/partial.blob (sequence 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY), OUTDIR/tokens.json
//       and OUTDIR/tokens1.json; q8_0: a q8_0 cache (flash attention on, as llama.cpp requires)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "llama.h"

static int fail(const char* what) {
  fprintf(stderr, "llama_states: %s\n", what);
  return 1;
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

static int save_states(const char* model_path, int n, const char* dir, int q8) {
  struct llama_model_params mp = llama_model_default_params();
  struct llama_model* m = llama_model_load_from_file(model_path, mp);
  if (!m) return fail("cannot load the model");
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512, cp.n_batch = 256, cp.n_ubatch = 256, cp.n_seq_max = 2, cp.n_threads = 1, cp.n_threads_batch = 1;
  cp.swa_full = false;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  if (q8) {  // a quantized V needs flash attention (then V is stored by row)
    cp.type_k = cp.type_v = GGML_TYPE_Q8_0;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
  }
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
  if (argc < 5) return fail("usage: llama_states BINS_DIR save MODEL.gguf N OUTDIR [q8_0]");
  ggml_backend_load_all_from_path(argv[1]);
  llama_backend_init();
  if (!strcmp(argv[2], "save") && (argc == 6 || (argc == 7 && !strcmp(argv[6], "q8_0"))))
    return save_states(argv[3], atoi(argv[4]), argv[5], argc == 7);
  return fail("unknown command");
}
