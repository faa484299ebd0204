//===- ModelLoaderTest.cpp - tensor and external data checks --------------===//

#include "ModelLoader.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace lamina::onnx;

namespace {
/// A scratch folder with one 64-byte data file.
class ExternalDataTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("lamina-ext", dir));
    llvm::SmallString<128> file(dir);
    llvm::sys::path::append(file, "w.bin");
    std::error_code ec;
    llvm::raw_fd_ostream os(file, ec);
    ASSERT_FALSE(ec);
    os << std::string(64, '\0');
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  ::onnx::TensorProto tensor(const std::string &location, int64_t offset,
                             int64_t length) {
    ::onnx::TensorProto t;
    t.set_name("w");
    t.set_data_type(::onnx::TensorProto::FLOAT);
    t.add_dims(4);
    t.add_dims(4);
    t.set_data_location(::onnx::TensorProto::EXTERNAL);
    auto add = [&](const char *k, const std::string &v) {
      auto *e = t.add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    add("location", location);
    if (offset >= 0)
      add("offset", std::to_string(offset));
    if (length >= 0)
      add("length", std::to_string(length));
    return t;
  }
  std::string check(const ::onnx::TensorProto &t) {
    TensorReader reader(dir);
    mlir::RankedTensorType type;
    return reader.validate(&ctx, t, type);
  }
  mlir::MLIRContext ctx;
  llvm::SmallString<128> dir;
};
} // namespace

TEST(CheckedNumElements, RejectsNegativeAndOverflow) {
  EXPECT_EQ(checkedNumElements({2, 3}), 6);
  EXPECT_EQ(checkedNumElements({0, 1 << 30}), 0);
  EXPECT_EQ(checkedNumElements({-1, 4}), -1);
  EXPECT_EQ(checkedNumElements({1 << 30, 1 << 30, 1 << 30}), -1);
}

TEST_F(ExternalDataTest, AcceptsRangeInsideTheFile) {
  EXPECT_EQ(check(tensor("w.bin", 0, 64)), "");
  EXPECT_EQ(check(tensor("w.bin", -1, -1)), "");
}

TEST_F(ExternalDataTest, RefusesEscapesAndBadRanges) {
  EXPECT_NE(check(tensor("/etc/passwd", 0, 64)).find("absolute"), std::string::npos);
  EXPECT_NE(check(tensor("../w.bin", 0, 64)).find(".."), std::string::npos);
  EXPECT_NE(check(tensor("w.bin", 32, 64)).find("past the end"), std::string::npos);
  EXPECT_NE(check(tensor("w.bin", 100, -1)).find("past the end"), std::string::npos);
  EXPECT_NE(check(tensor("w.bin", 0, 32)).find("differs"), std::string::npos);
  EXPECT_NE(check(tensor("missing.bin", 0, 64)).find("does not exist"),
            std::string::npos);
}

TEST_F(ExternalDataTest, RefusesLinksLeavingTheFolder) {
  llvm::SmallString<128> link(dir);
  llvm::sys::path::append(link, "link.bin");
  ASSERT_FALSE(llvm::sys::fs::create_link("/etc/hostname", link));
  EXPECT_NE(check(tensor("link.bin", 0, -1)).find("outside"), std::string::npos);
}
