/* llama.cpp's own quantizer, for tests/llamacpp/test_gguf_forward.sh: the call tools/quantize's
 * llama-quantize makes (llama_model_quantize with the default parameters and one file type), built
 * against node-llama-cpp's prebuilt libllama and the headers of the source bundle it ships, so that
 * CI needs no llama.cpp build. Usage: llama_quantize IN.gguf OUT.gguf q8_0|q4_0|q4_k_m|q5_0|q5_1|q4_1 */
#include <stdio.h>
#include <string.h>

#include "llama.h"

int main(int argc, char** argv) {
  static const struct {
    const char* name;
    enum llama_ftype ftype;
  } kTypes[] = {{"q8_0", LLAMA_FTYPE_MOSTLY_Q8_0}, {"q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},
                {"q4_1", LLAMA_FTYPE_MOSTLY_Q4_1}, {"q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},
                {"q5_1", LLAMA_FTYPE_MOSTLY_Q5_1}, {"q4_k_m", LLAMA_FTYPE_MOSTLY_Q4_K_M}};
  if (argc != 4) {
    fprintf(stderr, "usage: %s IN.gguf OUT.gguf TYPE\n", argv[0]);
    return 2;
  }
  struct llama_model_quantize_params params = llama_model_quantize_default_params();
  size_t i = 0;
  while (i < sizeof kTypes / sizeof kTypes[0] && strcmp(kTypes[i].name, argv[3]) != 0) ++i;
  if (i == sizeof kTypes / sizeof kTypes[0]) {
    fprintf(stderr, "unknown type %s\n", argv[3]);
    return 2;
  }
  params.ftype = kTypes[i].ftype;
  params.nthread = 1;
  llama_backend_init();
  const uint32_t rc = llama_model_quantize(argv[1], argv[2], &params);
  llama_backend_free();
  if (rc != 0) fprintf(stderr, "llama_model_quantize failed (%u)\n", rc);
  return rc == 0 ? 0 : 1;
}
