//===- Literal.cpp - host copies of constant tensors for folding ----------===//

#include "lamina/Dialect/Graph/IR/Literal.h"

using namespace mlir;
using namespace lamina::ir::graph;

SmallVector<int64_t> lamina::ir::graph::stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

void lamina::ir::graph::forEachIndex(
    ArrayRef<int64_t> shape,
    function_ref<void(ArrayRef<int64_t>, int64_t)> fn) {
  int64_t total = 1;
  for (int64_t d : shape)
    total *= d;
  SmallVector<int64_t> index(shape.size(), 0);
  for (int64_t linear = 0; linear < total; ++linear) {
    fn(index, linear);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++index[d] < shape[d])
        break;
      index[d] = 0;
    }
  }
}

static double toDouble(APFloat v) {
  bool lost;
  v.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &lost);
  return v.convertToDouble();
}

std::optional<Literal> Literal::read(Attribute attr, int64_t maxElements) {
  auto dense = dyn_cast_or_null<DenseElementsAttr>(attr);
  if (!dense)
    return std::nullopt;
  auto type = dyn_cast<RankedTensorType>(dense.getType());
  if (!type || !type.hasStaticShape())
    return std::nullopt;
  Literal lit;
  lit.type = type;
  lit.splat = dense.isSplat();
  if (!lit.splat && type.getNumElements() > maxElements)
    return std::nullopt;
  Type elementType = type.getElementType();
  if (isa<FloatType>(elementType)) {
    if (lit.splat)
      lit.f.push_back(toDouble(dense.getSplatValue<APFloat>()));
    else
      for (APFloat v : dense.getValues<APFloat>())
        lit.f.push_back(toDouble(v));
    return lit;
  }
  auto intType = dyn_cast<IntegerType>(elementType);
  if (!intType)
    return std::nullopt;
  bool zext = intType.isUnsigned() || intType.getWidth() == 1;
  auto conv = [&](const APInt &v) {
    return zext ? static_cast<int64_t>(v.getZExtValue()) : v.getSExtValue();
  };
  if (lit.splat)
    lit.i.push_back(conv(dense.getSplatValue<APInt>()));
  else
    for (APInt v : dense.getValues<APInt>())
      lit.i.push_back(conv(v));
  return lit;
}

DenseElementsAttr Literal::write(RankedTensorType resultType) const {
  RankedTensorType t = resultType ? resultType : type;
  Type elementType = t.getElementType();
  if (auto floatType = dyn_cast<FloatType>(elementType)) {
    SmallVector<APFloat> values;
    values.reserve(f.size());
    for (double v : f) {
      APFloat x(v);
      bool lost;
      x.convert(floatType.getFloatSemantics(), APFloat::rmNearestTiesToEven,
                &lost);
      values.push_back(x);
    }
    return DenseElementsAttr::get(t, values);
  }
  auto intType = cast<IntegerType>(elementType);
  SmallVector<APInt> values;
  values.reserve(i.size());
  for (int64_t v : i)
    values.push_back(APInt(intType.getWidth(), static_cast<uint64_t>(v),
                           /*isSigned=*/!intType.isUnsigned(),
                           /*implicitTrunc=*/true));
  return DenseElementsAttr::get(t, values);
}

Literal Literal::expanded() const {
  if (!splat)
    return *this;
  Literal out = *this;
  out.splat = false;
  int64_t n = type.getNumElements();
  if (isFloat())
    out.f.assign(n, f[0]);
  else
    out.i.assign(n, i[0]);
  return out;
}

Literal Literal::gather(RankedTensorType newType,
                        ArrayRef<int64_t> source) const {
  Literal out;
  out.type = newType;
  if (splat) {
    out.splat = true;
    out.f = f;
    out.i = i;
    return out;
  }
  for (int64_t s : source) {
    if (isFloat())
      out.f.push_back(f[s]);
    else
      out.i.push_back(i[s]);
  }
  return out;
}
