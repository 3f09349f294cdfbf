// Cache stores (formats/cache-stores.md): the block hashes kvtool recomputes against vectors from
// the real thing — CPython 3.11's pickle (protocol 5, the C pickler's framing) and hashlib, running
// the expressions vLLM (kv_cache_utils.hash_block_tokens with sha256) and SGLang (get_hash_str)
// evaluate — and CRC-32C against RFC 3720's test vectors.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "kvtool/sha256.h"
#include "kvtool/store_check.h"
#include "kvtool/store_prompt.h"

using namespace kvtool;

namespace {

std::vector<std::string> hexes(const std::vector<Digest>& d) {
  std::vector<std::string> out;
  for (const Digest& x : d) out.push_back(to_hex(x));
  return out;
}

std::vector<int32_t> iota(int32_t from, int32_t n) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < n; ++i) t.push_back(from + i);
  return t;
}

}  // namespace

TEST_CASE("vLLM block hashes equal sha256(pickle.dumps((parent, tokens, None), protocol=5)) as CPython computes them") {
  // /usr/bin/python3 (3.11): parent = sha256(pickle.dumps(seed)); per block
  // parent = sha256(pickle.dumps((parent, tuple(block), None), protocol=pickle.HIGHEST_PROTOCOL)).
  CHECK(hexes(vllm_block_hashes(iota(0, 40), 16, "0")) ==
        std::vector<std::string>{"6358e31578a64b75ebe28cdb99d3beae65de82a2087321dc6ec84ae048faaaa6",
                                 "3c3c50f324aefbdfbb124dfdc541efac3e94e59c40f4be08afe70601eeca92c8"});
  // Tuples of 3 (TUPLE3) and every integer opcode: BININT1, BININT2, BININT.
  CHECK(hexes(vllm_block_hashes({70000, 300, 5, 2147483647, 1, 256, 65535, 65536, 0}, 3, "abc")) ==
        std::vector<std::string>{"361826194fd5da1274428ae75d65c7dc195719aebe2e23406b7126cc3b21ddd4",
                                 "5c424e05f58c01a8eb8e6270de306d94c9a6153a7e0eaa32d56091223659dc8d",
                                 "2a19b0a57ca074190c78664253cd98ecb2bdf2c9c4d5e48782c4103e5355fe5b"});
  // TUPLE1 and an empty seed string.
  CHECK(hexes(vllm_block_hashes({7, 9}, 1, "")) ==
        std::vector<std::string>{"6fec6a7d09b713a1e0919233c97d028f640d1a960ff6c505579c6d1281a8e522",
                                 "5c4584b1e67f3321e31a76f9a51ee7bf857dd317ea04afa4923a6c2c06075a89"});
  // A seed of 300 characters (BINUNICODE); a partial last block is not hashed.
  std::vector<int32_t> t(7, 5);
  for (int32_t i = 300; i < 305; ++i) t.push_back(i);
  t.push_back(1);
  CHECK(hexes(vllm_block_hashes(t, 12, std::string(300, 'x'))) ==
        std::vector<std::string>{"d46f3dbf97efbff88f787ec88729a28adbece4f84990d76ae077e0bd3fd22e93"});
  // 100,000 tokens in one block: the pickle spans several 64 KiB frames.
  std::vector<int32_t> big;
  for (int32_t i = 0; i < 100000; ++i) big.push_back(i % 200000);
  CHECK(hexes(vllm_block_hashes(big, 100000, "42")) ==
        std::vector<std::string>{"f4c2126c70be3db742387064a513bd35b76bf518458b885c2d4073600a6e1d1f"});
}

TEST_CASE("SGLang page keys equal get_hash_str chained over the pages") {
  CHECK(hexes(sglang_page_keys(iota(1000, 13), 4)) ==
        std::vector<std::string>{"1d533aec2cd826f8f398589c20e169718d95dc7b123918889d58e0d09b7960c7",
                                 "2be5b730d7617a19b1b69dac4c2006c6e7bfd529c18f7580d47ab872f44b17bb",
                                 "90a04688b0ce8b4e82f689cd33ebedb79508e1da7d9c19f0a8bedc2cfaf928d2"});
}

TEST_CASE("CRC-32C matches RFC 3720's vectors and continues across calls") {
  const std::vector<uint8_t> zeros(32, 0), ones(32, 0xff);
  std::vector<uint8_t> up(32);
  for (int i = 0; i < 32; ++i) up[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  CHECK(crc32c(0, zeros.data(), zeros.size()) == 0x8A9136AAu);
  CHECK(crc32c(0, ones.data(), ones.size()) == 0x62A8AB43u);
  CHECK(crc32c(0, up.data(), up.size()) == 0x46DD794Eu);
  CHECK(crc32c(crc32c(0, up.data(), 10), up.data() + 10, 22) == 0x46DD794Eu);
  CHECK(crc32c(0, "123456789", 9) == 0xE3069283u);
}
