#include <catch2/catch.hpp>

#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/llama2c.h"
#include "kvtool/producers.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;

static const char* kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a "
    "big, red ball.";

TEST_CASE("stories260K greedy decoding from BOS reproduces the README sentence") {
  TempDir tmp;
  ModelDumpOptions o;
  o.model_path = shared_dir() + "/models/stories260K.bin";
  o.tokenizer_path = shared_dir() + "/models/tok512.bin";
  o.tokens = 64;
  ModelDumpResult r = dump_llama2c(o, DType::f32, {}, tmp.file("s.h5"));
  INFO(r.text);
  CHECK(r.text.rfind(std::string(kStory).substr(0, 60), 0) == 0);
  o.tokens = 120;
  r = dump_llama2c(o, DType::f32, {}, tmp.file("s.h5"));
  CHECK(r.text.rfind(kStory, 0) == 0);
  DumpReader d(tmp.file("s.h5"));
  CHECK(d.info().id.model_artifact_sha256 == "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696");
  CHECK(d.info().id.q_to_kv_head == std::vector<int32_t>{0, 0, 1, 1, 2, 2, 3, 3});
  CHECK(d.tokens().size() == 120);
  CHECK(d.tokens()[0] == 1);
}

TEST_CASE("a prompt is teacher-forced after BOS and cut when longer than --tokens") {
  TempDir tmp;
  Llama2cTokenizer tok(shared_dir() + "/models/tok512.bin", 512);
  auto ids = tok.encode("Tom had a dog", true);
  REQUIRE(ids.size() > 3);
  CHECK(ids[0] == 1);
  std::string back;
  for (size_t i = 1; i < ids.size(); ++i) back += tok.decode(ids[i - 1], ids[i]);
  CHECK(back == "Tom had a dog");
  ModelDumpOptions o;
  o.model_path = shared_dir() + "/models/stories260K.bin";
  o.tokenizer_path = o.model_path.substr(0, o.model_path.rfind('/')) + "/tok512.bin";
  o.prompt = "Tom had a dog";
  o.tokens = 32;
  o.queries = true;
  ModelDumpResult r = dump_llama2c(o, DType::f16, {}, tmp.file("p.h5"));
  for (size_t i = 0; i < ids.size(); ++i) CHECK(r.tokens[i] == ids[i]);
  CHECK(r.text.rfind("Tom had a dog", 0) == 0);
  DumpReader d(tmp.file("p.h5"));
  CHECK(d.info().has_q);
  CHECK(d.info().geo.q_tokens == 32);
  CHECK(d.info().geo.dtype == DType::f16);
  o.tokens = 2;
  r = dump_llama2c(o, DType::f32, {}, tmp.file("cut.h5"));
  CHECK(r.tokens == std::vector<int64_t>{ids[0], ids[1]});
}

TEST_CASE("bad checkpoints are rejected, not crashed on") {
  TempDir tmp;
  auto b = read_bytes(shared_dir() + "/models/stories260K.bin");
  b.resize(b.size() - 4);
  write_bytes(tmp.file("t.bin"), b);
  try {
    Llama2cModel m(tmp.file("t.bin"));
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.reason() == kvtool::Reason::BAD_MODEL);
  }
  write_bytes(tmp.file("z.bin"), std::vector<uint8_t>(28, 0xff));
  CHECK_THROWS_AS(Llama2cModel(tmp.file("z.bin")), Error);
}
