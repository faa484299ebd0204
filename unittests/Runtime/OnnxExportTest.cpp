//===- OnnxExportTest.cpp - writing trained weights into an ONNX model ----===//
//
// A small model with three initializers (raw_data, typed float_data, and
// external data) in a node's graph is exported with new values, then read
// back with the program driver's initializer reader.
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/OnnxExport.h"

#include "onnx-ml.pb.h"

#include "RuntimeTestUtil.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <vector>

using namespace lamina::rt;

namespace {

class OnnxExportTest : public test::TempDirTest {
protected:
  void SetUp() override {
    TempDirTest::SetUp();
    source = dir + "/model.onnx";
    // w: raw_data 2x2; b: float_data [2]; e: external [4] in weights.bin;
    // ids: int64 raw, kept.
    onnx::ModelProto model;
    model.set_ir_version(8);
    model.add_opset_import()->set_version(17);
    onnx::GraphProto *g = model.mutable_graph();
    g->set_name("g");
    auto add = [&](const std::string &name, int type,
                   std::vector<int64_t> dims) {
      onnx::TensorProto *t = g->add_initializer();
      t->set_name(name);
      t->set_data_type(type);
      for (int64_t d : dims)
        t->add_dims(d);
      return t;
    };
    float wv[4] = {1, 2, 3, 4};
    add("w", onnx::TensorProto::FLOAT, {2, 2})
        ->set_raw_data(std::string(reinterpret_cast<char *>(wv), 16));
    onnx::TensorProto *b = add("b", onnx::TensorProto::FLOAT, {2});
    b->add_float_data(5);
    b->add_float_data(6);
    float ev[4] = {7, 8, 9, 10};
    {
      std::ofstream f(dir + "/weights.bin", std::ios::binary);
      f.write("pad!", 4);
      f.write(reinterpret_cast<char *>(ev), 16);
    }
    onnx::TensorProto *e = add("e", onnx::TensorProto::FLOAT, {4});
    e->set_data_location(onnx::TensorProto::EXTERNAL);
    for (auto [k, v] : {std::pair<const char *, const char *>{"location",
                                                              "weights.bin"},
                        {"offset", "4"},
                        {"length", "16"}}) {
      auto *entry = e->add_external_data();
      entry->set_key(k);
      entry->set_value(v);
    }
    int64_t ids[2] = {3, 1};
    add("ids", onnx::TensorProto::INT64, {2})
        ->set_raw_data(std::string(reinterpret_cast<char *>(ids), 16));
    onnx::NodeProto *node = g->add_node();
    node->set_op_type("Add");
    node->add_input("w");
    node->add_input("b");
    node->add_output("y");
    std::ofstream out(source, std::ios::binary);
    ASSERT_TRUE(model.SerializeToOstream(&out));
  }
  static std::vector<float> floats(const OwnedTensor &t) {
    const float *p = static_cast<const float *>(t.data());
    return std::vector<float>(p, p + t.numElements());
  }

  std::string source;
  const int64_t wShape[2] = {2, 2};
  const int64_t bShape[1] = {2};
};

TEST_F(OnnxExportTest, ReplacesAndInlines) {
  std::map<std::string, OwnedTensor> before;
  Status s = readInitializers(source, before);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(floats(before["e"]), (std::vector<float>{7, 8, 9, 10}));

  float newW[4] = {-1, -2, -3, -4}, newB[2] = {0.5f, 0.25f};
  NamedView repl[] = {{"w", Tensor{newW, DType::F32, 2, wShape}},
                      {"b", Tensor{newB, DType::F32, 1, bShape}}};
  // Exported into another folder: nothing may point back at weights.bin.
  std::string outDir = dir + "/out";
  ASSERT_EQ(mkdir(outDir.c_str(), 0755), 0);
  std::string dest = outDir + "/trained.onnx";
  s = exportOnnx(source, dest, repl, 2);
  ASSERT_TRUE(s.ok()) << s.message();

  std::map<std::string, OwnedTensor> after;
  s = readInitializers(dest, after);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(floats(after["w"]), (std::vector<float>{-1, -2, -3, -4}));
  EXPECT_EQ(after["w"].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(floats(after["b"]), (std::vector<float>{0.5f, 0.25f}));
  EXPECT_EQ(floats(after["e"]), (std::vector<float>{7, 8, 9, 10}));
  EXPECT_EQ(static_cast<const int64_t *>(after["ids"].data())[0], 3);

  // The graph itself is unchanged.
  onnx::ModelProto model;
  std::ifstream in(dest, std::ios::binary);
  ASSERT_TRUE(model.ParseFromIstream(&in));
  ASSERT_EQ(model.graph().node_size(), 1);
  EXPECT_EQ(model.graph().node(0).op_type(), "Add");
  for (const auto &t : model.graph().initializer())
    EXPECT_NE(t.data_location(), onnx::TensorProto::EXTERNAL) << t.name();
}

TEST_F(OnnxExportTest, LargeModelsUseASiblingDataFile) {
  // An inline limit of 0 stands in for a model over 2 GiB.
  std::vector<float> big(1024);
  for (size_t i = 0; i < big.size(); ++i)
    big[i] = float(i);
  int64_t shape[1] = {4};
  std::vector<float> e{1, 1, 1, 1};
  NamedView repl[] = {{"e", Tensor{e.data(), DType::F32, 1, shape}}};
  std::string dest = dir + "/big.onnx";
  Status s = exportOnnx(source, dest, repl, 1, /*inlineLimit=*/0);
  ASSERT_TRUE(s.ok()) << s.message();
  struct stat st;
  EXPECT_EQ(stat((dest + ".data").c_str(), &st), 0);
  std::map<std::string, OwnedTensor> after;
  s = readInitializers(dest, after);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(floats(after["e"]), e);
  EXPECT_EQ(floats(after["w"]), (std::vector<float>{1, 2, 3, 4}));
}

TEST_F(OnnxExportTest, RefusesMismatches) {
  float v[4] = {};
  int64_t other[2] = {4, 1};
  std::string dest = dir + "/x.onnx";
  auto tryExport = [&](NamedView view) {
    return exportOnnx(source, dest, &view, 1).message();
  };
  std::string m = tryExport({"w", Tensor{v, DType::F32, 2, other}});
  EXPECT_NE(m.find("initializer 'w'"), std::string::npos) << m;
  EXPECT_NE(m.find("the model has tensor<2x2xf32>, the new value is "
                   "tensor<4x1xf32>"),
            std::string::npos)
      << m;
  m = tryExport({"w", Tensor{v, DType::I32, 2, wShape}});
  EXPECT_NE(m.find("tensor<2x2xi32>"), std::string::npos) << m;
  m = tryExport({"nope", Tensor{v, DType::F32, 2, wShape}});
  EXPECT_NE(m.find("no initializer named 'nope'"), std::string::npos) << m;
  NamedView twice[] = {{"w", Tensor{v, DType::F32, 2, wShape}},
                       {"w", Tensor{v, DType::F32, 2, wShape}}};
  EXPECT_NE(exportOnnx(source, dest, twice, 2).message().find("given twice"),
            std::string::npos);
  struct stat st;
  EXPECT_NE(stat(dest.c_str(), &st), 0) << "nothing written on error";
  m = exportOnnx(dir + "/missing.onnx", dest, nullptr, 0).message();
  EXPECT_NE(m.find("missing.onnx"), std::string::npos) << m;
}

} // namespace
