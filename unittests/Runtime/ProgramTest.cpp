//===- ProgramTest.cpp - the driver of generated programs -----------------===//
//
// A hand-written ProgramSpec stands in for generated code: its entry writes
// sum = x + y + w and twice = 2 * x into the arena, where x and y are inputs
// and w is an initializer of a small ONNX model written here with the
// protobuf classes. programMain runs in-process.
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/Program.h"
#include "lamina/Runtime/TensorIO.h"

#include "onnx-ml.pb.h"

#include "RuntimeTestUtil.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace lamina::rt;

namespace {

const int64_t kShape[] = {2, 3};
const ArgSpec kArgs[] = {
    {"x", ArgKind::Input, DType::F32, 2, kShape},
    {"y", ArgKind::Input, DType::F32, 2, kShape},
    {"w", ArgKind::Trainable, DType::F32, 2, kShape},
};
// The second output's name is not a valid file name on its own.
const OutputSpec kOutputs[] = {
    {"sum", DType::F32, 2, kShape, 0},
    {"out:0/twice", DType::F32, 2, kShape, 64},
};

void entry(const Tensor *args, void *arena) {
  const float *x = args[0].as<float>(), *y = args[1].as<float>(),
              *w = args[2].as<float>();
  float *sum = static_cast<float *>(arena);
  float *twice = reinterpret_cast<float *>(static_cast<char *>(arena) + 64);
  for (int i = 0; i < 6; ++i) {
    sum[i] = x[i] + y[i] + w[i];
    twice[i] = 2 * x[i];
  }
}

class ProgramTest : public test::TempDirTest {
protected:
  void SetUp() override {
    TempDirTest::SetUp();
    modelPath = dir + "/model.onnx";
    spec = ProgramSpec{modelPath.c_str(), kArgs, 3, kOutputs, 2, 128, entry};
    writeF32Npy(dir + "/x.npy", {2, 3}, {1, 2, 3, 4, 5, 6});
    writeF32Pb(dir + "/y.pb", {2, 3}, {10, 20, 30, 40, 50, 60});
    writeModel(rawInitializer("w", {100, 200, 300, 400, 500, 600}));
  }

  static void writeF32Npy(const std::string &path, std::vector<int64_t> shape,
                          std::vector<float> values) {
    Tensor t{values.data(), DType::F32, int(shape.size()), shape.data()};
    ASSERT_TRUE(writeNpy(path, t).ok());
  }
  static void writeF32Pb(const std::string &path, std::vector<int64_t> shape,
                         std::vector<float> values) {
    onnx::TensorProto t;
    t.set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : shape)
      t.add_dims(d);
    for (float v : values)
      t.add_float_data(v);
    writeProto(path, t);
  }
  static onnx::TensorProto rawInitializer(const std::string &name,
                                          std::vector<float> values,
                                          std::vector<int64_t> shape = {2, 3}) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : shape)
      t.add_dims(d);
    t.set_raw_data(std::string(reinterpret_cast<const char *>(values.data()),
                               values.size() * sizeof(float)));
    return t;
  }
  /// An initializer whose data lives in `location`, relative to the model.
  static onnx::TensorProto externalInitializer(const std::string &location,
                                               int64_t offset = 0) {
    onnx::TensorProto t;
    t.set_name("w");
    t.set_data_type(onnx::TensorProto::FLOAT);
    t.add_dims(2);
    t.add_dims(3);
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    auto *loc = t.add_external_data();
    loc->set_key("location");
    loc->set_value(location);
    auto *off = t.add_external_data();
    off->set_key("offset");
    off->set_value(std::to_string(offset));
    return t;
  }
  static void writeProto(const std::string &path,
                         const google::protobuf::MessageLite &m) {
    std::ofstream os(path, std::ios::binary);
    ASSERT_TRUE(m.SerializeToOstream(&os));
  }
  void writeModel(const onnx::TensorProto &init, bool inSubgraph = false) {
    onnx::ModelProto model;
    model.set_ir_version(8);
    onnx::GraphProto *graph = model.mutable_graph();
    graph->set_name("g");
    if (inSubgraph) {
      onnx::NodeProto *node = graph->add_node();
      node->set_op_type("If");
      onnx::AttributeProto *attr = node->add_attribute();
      attr->set_name("then_branch");
      attr->set_type(onnx::AttributeProto::GRAPH);
      *attr->mutable_g()->add_initializer() = init;
    } else {
      *graph->add_initializer() = init;
    }
    writeProto(modelPath, model);
  }
  static void writeBytes(const std::string &path, const void *data,
                         size_t n) {
    std::ofstream os(path, std::ios::binary);
    os.write(static_cast<const char *>(data), std::streamsize(n));
  }

  /// Runs programMain on `args` (argv[0] added); captures stderr into
  /// `err` unless `capture` is false (death tests read stderr themselves).
  int run(std::vector<std::string> args, bool capture = true) {
    args.insert(args.begin(), "run");
    std::vector<char *> argv;
    for (std::string &a : args)
      argv.push_back(&a[0]);
    if (capture)
      ::testing::internal::CaptureStderr();
    int rc = programMain(int(argv.size()), argv.data(), spec);
    if (capture)
      err = ::testing::internal::GetCapturedStderr();
    return rc;
  }
  int runDefault(bool capture = true) {
    return run({"--input", "x=" + dir + "/x.npy", "--input",
                "y=" + dir + "/y.pb", "--output-dir", outDir()},
               capture);
  }
  std::string outDir() const { return dir + "/out/nested"; }
  bool exists(const std::string &path) const {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
  }
  std::vector<float> readOutput(const std::string &file) {
    OwnedTensor t;
    Status s = readNpy(outDir() + "/" + file, t);
    EXPECT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(t.dtype, DType::F32);
    EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
    const float *p = static_cast<const float *>(t.data());
    return std::vector<float>(p, p + t.numElements());
  }
  /// The error path: exit 1, `message` in stderr, no output folder.
  void expectError(int rc, const std::string &message) {
    EXPECT_EQ(rc, 1);
    EXPECT_NE(err.find("error: "), std::string::npos) << err;
    EXPECT_NE(err.find(message), std::string::npos) << err;
    EXPECT_FALSE(exists(dir + "/out")) << "outputs written on error";
  }

  std::string modelPath, err;
  ProgramSpec spec{};
};

TEST_F(ProgramTest, RunsAndWritesOutputs) {
  ASSERT_EQ(runDefault(), 0) << err;
  EXPECT_EQ(readOutput("sum.npy"),
            (std::vector<float>{111, 222, 333, 444, 555, 666}));
  EXPECT_EQ(readOutput("out%3A0%2Ftwice.npy"),
            (std::vector<float>{2, 4, 6, 8, 10, 12}));
}

TEST_F(ProgramTest, RepeatTimeAndThreads) {
  ASSERT_EQ(run({"--input=x=" + dir + "/x.npy", "--input", "y=" + dir + "/y.pb",
                 "--output-dir", outDir(), "--repeat", "3", "--time",
                 "--threads", "1"}),
            0)
      << err;
  EXPECT_NE(err.find("ms per run (mean of 3)"), std::string::npos) << err;
  EXPECT_EQ(readOutput("sum.npy")[0], 111);
}

TEST_F(ProgramTest, ModelOverride) {
  std::string other = dir + "/sub";
  ASSERT_EQ(::mkdir(other.c_str(), 0755), 0);
  std::string saved = modelPath;
  modelPath = other + "/m.onnx";
  writeModel(rawInitializer("w", {0, 0, 0, 0, 0, 1}));
  modelPath = saved; // the spec still names the first model
  ASSERT_EQ(run({"--input", "x=" + dir + "/x.npy", "--input",
                 "y=" + dir + "/y.pb", "--output-dir", outDir(), "--model",
                 other + "/m.onnx"}),
            0)
      << err;
  EXPECT_EQ(readOutput("sum.npy"), (std::vector<float>{11, 22, 33, 44, 55, 67}));
}

TEST_F(ProgramTest, SubgraphInitializer) {
  writeModel(rawInitializer("w", {1, 1, 1, 1, 1, 1}), /*inSubgraph=*/true);
  ASSERT_EQ(runDefault(), 0) << err;
  EXPECT_EQ(readOutput("sum.npy")[5], 67);
}

TEST_F(ProgramTest, WrongShape) {
  writeF32Npy(dir + "/x.npy", {3, 2}, {1, 2, 3, 4, 5, 6});
  expectError(runDefault(),
              "input 'x': expected tensor<2x3xf32>, got tensor<3x2xf32>");
}

TEST_F(ProgramTest, WrongDtype) {
  std::vector<double> values(6, 1.0);
  int64_t shape[] = {2, 3};
  ASSERT_TRUE(
      writeNpy(dir + "/x.npy", Tensor{values.data(), DType::F64, 2, shape}).ok());
  expectError(runDefault(),
              "input 'x': expected tensor<2x3xf32>, got tensor<2x3xf64>");
}

TEST_F(ProgramTest, MissingInput) {
  expectError(run({"--input", "x=" + dir + "/x.npy", "--output-dir", outDir()}),
              "missing input 'y' (tensor<2x3xf32>)");
}

TEST_F(ProgramTest, UnknownAndRepeatedInput) {
  expectError(run({"--input", "x=" + dir + "/x.npy", "--input",
                   "y=" + dir + "/y.pb", "--input", "z=" + dir + "/x.npy",
                   "--output-dir", outDir()}),
              "unknown input 'z' (the model's inputs: 'x', 'y')");
  expectError(run({"--input", "x=" + dir + "/x.npy", "--input",
                   "x=" + dir + "/x.npy", "--output-dir", outDir()}),
              "input 'x' is given more than once");
}

TEST_F(ProgramTest, UnreadableInput) {
  expectError(run({"--input", "x=" + dir + "/nope.npy", "--input",
                   "y=" + dir + "/y.pb", "--output-dir", outDir()}),
              "input 'x': cannot open");
  writeBytes(dir + "/x.npy", "\x93NUMPY\x01\x00\x04\x00{}  ", 14);
  expectError(runDefault(), "is not a supported .npy file");
}

TEST_F(ProgramTest, MissingInitializer) {
  writeModel(rawInitializer("v", {1, 1, 1, 1, 1, 1}));
  expectError(runDefault(), "no initializer named 'w' in '" + modelPath +
                                "' (the program expects tensor<2x3xf32>)");
}

TEST_F(ProgramTest, InitializerWrongShape) {
  writeModel(rawInitializer("w", {1, 1, 1, 1, 1, 1}, {3, 2}));
  expectError(runDefault(),
              "initializer 'w' in '" + modelPath +
                  "': expected tensor<2x3xf32>, got tensor<3x2xf32>");
}

TEST_F(ProgramTest, ExternalData) {
  std::vector<float> w = {-1, -2, -3, -4, -5, -6};
  std::vector<float> padded(2, 0.f);
  padded.insert(padded.end(), w.begin(), w.end());
  writeBytes(dir + "/w.bin", padded.data(), padded.size() * sizeof(float));
  writeModel(externalInitializer("w.bin", 8));
  ASSERT_EQ(runDefault(), 0) << err;
  EXPECT_EQ(readOutput("sum.npy"), (std::vector<float>{10, 20, 30, 40, 50, 60}));
}

TEST_F(ProgramTest, ExternalDataEscapingTheFolder) {
  std::string sub = dir + "/model";
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  std::vector<float> w(6, 1.f);
  writeBytes(dir + "/w.bin", w.data(), w.size() * sizeof(float));
  modelPath = sub + "/model.onnx";
  spec.modelPath = modelPath.c_str();

  writeModel(externalInitializer("../w.bin"));
  expectError(runDefault(), "leaves the model's folder ('..')");
  writeModel(externalInitializer(dir + "/w.bin"));
  expectError(runDefault(), "is an absolute path");
  ASSERT_EQ(::symlink((dir + "/w.bin").c_str(), (sub + "/link.bin").c_str()), 0);
  writeModel(externalInitializer("link.bin"));
  expectError(runDefault(), "resolves outside the model's folder");
}

TEST_F(ProgramTest, TruncatedExternalData) {
  std::vector<float> w(5, 1.f); // the dims need 6
  writeBytes(dir + "/w.bin", w.data(), w.size() * sizeof(float));
  writeModel(externalInitializer("w.bin"));
  expectError(runDefault(), "runs past the end of 'w.bin' (20 bytes)");
  writeModel(externalInitializer("w.bin", 100));
  expectError(runDefault(), "offset 100 is past the end");
}

TEST_F(ProgramTest, PbInputWithExternalData) {
  // A .pb's external data is resolved in the .pb's own folder.
  std::vector<float> y = {1, 1, 1, 1, 1, 1};
  writeBytes(dir + "/y.bin", y.data(), y.size() * sizeof(float));
  onnx::TensorProto t = externalInitializer("y.bin");
  writeProto(dir + "/y.pb", t);
  ASSERT_EQ(runDefault(), 0) << err;
  EXPECT_EQ(readOutput("sum.npy")[0], 102);
  ASSERT_EQ(std::system(("rm -rf '" + dir + "/out'").c_str()), 0);
  writeProto(dir + "/y.pb", externalInitializer("../y.bin"));
  expectError(runDefault(), "input 'y': '" + dir + "/y.pb': external data "
                            "location '../y.bin' leaves the model's folder");
}

void failingEntry(const Tensor *, void *) {
  checkKernel(Status::error("index 9 is out of range"), "node 'g' (graph.gather)");
}

TEST_F(ProgramTest, KernelErrorWritesNothing) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  spec.entry = failingEntry;
  EXPECT_EXIT(runDefault(/*capture=*/false), ::testing::ExitedWithCode(1),
              "error: at node 'g' \\(graph.gather\\): index 9 is out of range");
  EXPECT_FALSE(exists(dir + "/out"));
}

TEST_F(ProgramTest, CorruptModel) {
  writeBytes(modelPath, "\xff\xff\xff", 3);
  expectError(runDefault(), "is not a valid ONNX model");
}

TEST_F(ProgramTest, UsageErrors) {
  EXPECT_EQ(run({"--input", "x=" + dir + "/x.npy"}), 2);
  EXPECT_NE(err.find("--output-dir is required"), std::string::npos) << err;
  EXPECT_EQ(run({"--output-dir", outDir(), "--threads", "0"}), 2);
  EXPECT_EQ(run({"--output-dir", outDir(), "--bogus"}), 2);
  EXPECT_EQ(run({"--output-dir", outDir(), "--input", "novalue"}), 2);
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(run({"--help"}), 0);
  EXPECT_NE(::testing::internal::GetCapturedStdout().find("usage: run"),
            std::string::npos);
  EXPECT_FALSE(exists(dir + "/out"));
}

// Non-f32 values through every path: typed int64_data in a .pb, a bool
// .npy, bf16 bit patterns in a u2 .npy, and an f16 initializer stored in
// int32_data. The entry copies each into the arena.
const int64_t kThree[] = {3}, kTwo[] = {2};
const ArgSpec kTypedArgs[] = {
    {"ids", ArgKind::Input, DType::I64, 1, kThree},
    {"flag", ArgKind::Input, DType::I1, 1, kThree},
    {"h", ArgKind::Input, DType::BF16, 1, kTwo},
    {"c", ArgKind::Constant, DType::F16, 1, kTwo},
};
const OutputSpec kTypedOutputs[] = {
    {"ids", DType::I64, 1, kThree, 0},
    {"flag", DType::I1, 1, kThree, 64},
    {"h", DType::BF16, 1, kTwo, 128},
    {"c", DType::F16, 1, kTwo, 192},
};
void copyEntry(const Tensor *args, void *arena) {
  for (int i = 0; i < 4; ++i)
    std::memcpy(static_cast<char *>(arena) + 64 * i, args[i].data,
                args[i].byteSize());
}

TEST_F(ProgramTest, OtherDtypes) {
  spec = ProgramSpec{modelPath.c_str(), kTypedArgs, 4, kTypedOutputs, 4, 256,
                     copyEntry};
  onnx::TensorProto ids;
  ids.set_data_type(onnx::TensorProto::INT64);
  ids.add_dims(3);
  for (int64_t v : {-1LL, 1LL << 40, 7LL})
    ids.add_int64_data(v);
  writeProto(dir + "/ids.pb", ids);
  uint8_t flags[] = {0, 2, 1}; // 2: a sloppy writer's "true"
  Tensor flagT{flags, DType::I1, 1, kThree};
  ASSERT_TRUE(writeNpy(dir + "/flag.npy", flagT).ok());
  uint16_t bf16[] = {0x3f80, 0xc000};
  ASSERT_TRUE(writeNpy(dir + "/h.npy", Tensor{bf16, DType::BF16, 1, kTwo}).ok());
  onnx::TensorProto c;
  c.set_name("c");
  c.set_data_type(onnx::TensorProto::FLOAT16);
  c.add_dims(2);
  c.add_int32_data(0x3c00); // 1.0
  c.add_int32_data(0xc000); // -2.0
  writeModel(c);
  ASSERT_EQ(run({"--input", "ids=" + dir + "/ids.pb", "--input",
                 "flag=" + dir + "/flag.npy", "--input", "h=" + dir + "/h.npy",
                 "--output-dir", outDir()}),
            0)
      << err;
  OwnedTensor t;
  ASSERT_TRUE(readNpy(outDir() + "/ids.npy", t).ok());
  EXPECT_EQ(t.dtype, DType::I64);
  EXPECT_EQ(static_cast<int64_t *>(t.data())[1], 1LL << 40);
  ASSERT_TRUE(readNpy(outDir() + "/flag.npy", t).ok());
  EXPECT_EQ(t.dtype, DType::I1);
  EXPECT_EQ(static_cast<uint8_t *>(t.data())[1], 1);
  ASSERT_TRUE(readNpy(outDir() + "/h.npy", t).ok());
  EXPECT_EQ(t.dtype, DType::U16); // bf16 bit patterns
  EXPECT_EQ(static_cast<uint16_t *>(t.data())[1], 0xc000);
  ASSERT_TRUE(readNpy(outDir() + "/c.npy", t).ok());
  EXPECT_EQ(t.dtype, DType::F16);
  EXPECT_EQ(static_cast<uint16_t *>(t.data())[0], 0x3c00);
}

TEST(ProgramDeathTest, CheckKernelExits) {
  // The kernel thread pool may be running: re-execute rather than fork.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  checkKernel(Status::success(), "fine");
  EXPECT_EXIT(checkKernel(Status::error("boom"), "node 'n' (graph.add)"),
              ::testing::ExitedWithCode(1), "error: at node 'n' \\(graph.add\\): boom");
}

TEST(OutputFileName, IsInjectiveAndSafe) {
  EXPECT_EQ(outputFileName("logits"), "logits.npy");
  EXPECT_EQ(outputFileName("out:0"), "out%3A0.npy");
  EXPECT_EQ(outputFileName("a/b"), "a%2Fb.npy");
  EXPECT_EQ(outputFileName(".."), "%2E..npy");
  EXPECT_EQ(outputFileName("50%"), "50%25.npy");
  EXPECT_EQ(outputFileName(""), "%.npy");
  EXPECT_NE(outputFileName("a_b"), outputFileName("a/b"));
}

TEST(TensorIO, NpyRoundTripsBoolAndBf16) {
  char tmpl[] = "/tmp/lamina-npy-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string path = std::string(tmpl) + "/t.npy";
  int64_t shape[] = {3};
  uint8_t flags[] = {1, 0, 1};
  ASSERT_TRUE(writeNpy(path, Tensor{flags, DType::I1, 1, shape}).ok());
  OwnedTensor t;
  ASSERT_TRUE(readNpy(path, t).ok());
  EXPECT_EQ(t.dtype, DType::I1);
  EXPECT_EQ(static_cast<uint8_t *>(t.data())[2], 1);
  // bf16 travels as its bit patterns in a '<u2' file.
  uint16_t bits[] = {0x3f80, 0x4000, 0xc040};
  ASSERT_TRUE(writeNpy(path, Tensor{bits, DType::BF16, 1, shape}).ok());
  ASSERT_TRUE(readNpy(path, t).ok());
  EXPECT_EQ(t.dtype, DType::U16);
  EXPECT_EQ(static_cast<uint16_t *>(t.data())[2], 0xc040);
  // Scalars: shape ().
  float one = 1;
  ASSERT_TRUE(writeNpy(path, Tensor{&one, DType::F32, 0, nullptr}).ok());
  ASSERT_TRUE(readNpy(path, t).ok());
  EXPECT_TRUE(t.shape.empty());
  EXPECT_EQ(*static_cast<float *>(t.data()), 1.f);
  std::string cmd = std::string("rm -rf '") + tmpl + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
}

} // namespace
