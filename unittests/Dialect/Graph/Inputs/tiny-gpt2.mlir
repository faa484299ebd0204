// Tiny GPT-2 as imported, for GradientTest's TinyGpt2 check. Regenerate with:
//   PYTHONPATH=python python3 -m lamina.models gpt2 --layers 1 --hidden 16 --heads 2 \
//     --seq 4 --batch 2 --vocab 32 -o g.onnx && lamina import g.onnx -o tiny-gpt2.mlir
module {
  func.func @forward(%arg0: tensor<32x16xf32> {graph.kind = "trainable", graph.name = "transformer.wte.weight"}, %arg1: tensor<4x16xf32> {graph.kind = "trainable", graph.name = "transformer.wpe.weight"}, %arg2: tensor<16xf32> {graph.kind = "trainable", graph.name = "transformer.h.0.ln_1.weight"}, %arg3: tensor<16xf32> {graph.kind = "trainable", graph.name = "transformer.h.0.ln_1.bias"}, %arg4: tensor<16x48xf32> {graph.kind = "trainable", graph.name = "transformer.h.0.attn.c_attn.weight"}, %arg5: tensor<48xf32> {graph.kind = "trainable", graph.name = "transformer.h.0.attn.c_attn.bias"}, %arg6: tensor<16x16xf32> {graph.kind = "trainable", graph.name = "transformer.h.0.attn.c_proj.weight"}, %arg7: tensor<16xf32> {graph.kind = "trainable", graph.name = "transformer.h.0.attn.c_proj.bias"}, %arg8: tensor<16xf32> {graph.kind = "trainable", graph.name = "transformer.h.0.ln_2.weight"}, %arg9: tensor<16xf32> {graph.kind = "trainable", graph.name = "transformer.h.0.ln_2.bias"}, %arg10: tensor<16x64xf32> {graph.kind = "trainable", graph.name = "transformer.h.0.mlp.c_fc.weight"}, %arg11: tensor<64xf32> {graph.kind = "trainable", graph.name = "transformer.h.0.mlp.c_fc.bias"}, %arg12: tensor<64x16xf32> {graph.kind = "trainable", graph.name = "transformer.h.0.mlp.c_proj.weight"}, %arg13: tensor<16xf32> {graph.kind = "trainable", graph.name = "transformer.h.0.mlp.c_proj.bias"}, %arg14: tensor<16xf32> {graph.kind = "trainable", graph.name = "transformer.ln_f.weight"}, %arg15: tensor<16xf32> {graph.kind = "trainable", graph.name = "transformer.ln_f.bias"}, %arg16: tensor<2x4xi64> {graph.kind = "input", graph.name = "input_ids"}) -> tensor<2x4x32xf32> attributes {graph.output_names = ["logits"]} {
    %0 = graph.constant dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>
    %1 = graph.gather %arg0, %arg16 {axis = 0 : i64} : (tensor<32x16xf32>, tensor<2x4xi64>) -> tensor<2x4x16xf32>
    %2 = graph.gather %arg1, %0 {axis = 0 : i64} : (tensor<4x16xf32>, tensor<1x4xi64>) -> tensor<1x4x16xf32>
    %3 = graph.add %1, %2 : (tensor<2x4x16xf32>, tensor<1x4x16xf32>) -> tensor<2x4x16xf32>
    %4 = graph.constant dense<[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]> : tensor<4x4xi1>
    %5 = graph.layer_norm %3, %arg2, %arg3 {axis = 2 : i64, epsilon = 9.9999997473787516E-6 : f64} : tensor<2x4x16xf32>, tensor<16xf32>, tensor<16xf32>
    %6 = graph.matmul %5, %arg4 : (tensor<2x4x16xf32>, tensor<16x48xf32>) -> tensor<2x4x48xf32>
    %7 = graph.add %arg5, %6 : (tensor<48xf32>, tensor<2x4x48xf32>) -> tensor<2x4x48xf32>
    %8 = graph.slice %7 {sizes = array<i64: 2, 4, 16>, starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : tensor<2x4x48xf32> -> tensor<2x4x16xf32>
    %9 = graph.slice %7 {sizes = array<i64: 2, 4, 16>, starts = array<i64: 0, 0, 16>, steps = array<i64: 1, 1, 1>} : tensor<2x4x48xf32> -> tensor<2x4x16xf32>
    %10 = graph.slice %7 {sizes = array<i64: 2, 4, 16>, starts = array<i64: 0, 0, 32>, steps = array<i64: 1, 1, 1>} : tensor<2x4x48xf32> -> tensor<2x4x16xf32>
    %11 = graph.reshape %8 : tensor<2x4x16xf32> to tensor<2x4x2x8xf32>
    %12 = graph.transpose %11 {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x2x8xf32> -> tensor<2x2x4x8xf32>
    %13 = graph.reshape %9 : tensor<2x4x16xf32> to tensor<2x4x2x8xf32>
    %14 = graph.transpose %13 {perm = array<i64: 0, 2, 3, 1>} : tensor<2x4x2x8xf32> -> tensor<2x2x8x4xf32>
    %15 = graph.reshape %10 : tensor<2x4x16xf32> to tensor<2x4x2x8xf32>
    %16 = graph.transpose %15 {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x2x8xf32> -> tensor<2x2x4x8xf32>
    %17 = graph.matmul %12, %14 : (tensor<2x2x4x8xf32>, tensor<2x2x8x4xf32>) -> tensor<2x2x4x4xf32>
    %18 = graph.constant dense<2.82842708> : tensor<f32>
    %19 = graph.div %17, %18 : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
    %20 = graph.constant dense<-3.40282347E+38> : tensor<f32>
    %21 = graph.select %4, %20, %19 : (tensor<4x4xi1>, tensor<f32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
    %22 = graph.softmax %21 {axis = 3 : i64} : tensor<2x2x4x4xf32>
    %23 = graph.matmul %22, %16 : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
    %24 = graph.transpose %23 {perm = array<i64: 0, 2, 1, 3>} : tensor<2x2x4x8xf32> -> tensor<2x4x2x8xf32>
    %25 = graph.reshape %24 : tensor<2x4x2x8xf32> to tensor<2x4x16xf32>
    %26 = graph.matmul %25, %arg6 : (tensor<2x4x16xf32>, tensor<16x16xf32>) -> tensor<2x4x16xf32>
    %27 = graph.add %arg7, %26 : (tensor<16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
    %28 = graph.add %27, %3 : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
    %29 = graph.layer_norm %28, %arg8, %arg9 {axis = 2 : i64, epsilon = 9.9999997473787516E-6 : f64} : tensor<2x4x16xf32>, tensor<16xf32>, tensor<16xf32>
    %30 = graph.matmul %29, %arg10 : (tensor<2x4x16xf32>, tensor<16x64xf32>) -> tensor<2x4x64xf32>
    %31 = graph.add %arg11, %30 : (tensor<64xf32>, tensor<2x4x64xf32>) -> tensor<2x4x64xf32>
    %32 = graph.constant dense<5.000000e-01> : tensor<f32>
    %33 = graph.mul %31, %32 : (tensor<2x4x64xf32>, tensor<f32>) -> tensor<2x4x64xf32>
    %34 = graph.constant dense<3.000000e+00> : tensor<f32>
    %35 = graph.pow %31, %34 : (tensor<2x4x64xf32>, tensor<f32>) -> tensor<2x4x64xf32>
    %36 = graph.constant dense<4.471500e-02> : tensor<f32>
    %37 = graph.mul %35, %36 : (tensor<2x4x64xf32>, tensor<f32>) -> tensor<2x4x64xf32>
    %38 = graph.add %31, %37 : (tensor<2x4x64xf32>, tensor<2x4x64xf32>) -> tensor<2x4x64xf32>
    %39 = graph.constant dense<0.797884583> : tensor<f32>
    %40 = graph.mul %38, %39 : (tensor<2x4x64xf32>, tensor<f32>) -> tensor<2x4x64xf32>
    %41 = graph.tanh %40 : tensor<2x4x64xf32>
    %42 = graph.constant dense<1.000000e+00> : tensor<f32>
    %43 = graph.add %41, %42 : (tensor<2x4x64xf32>, tensor<f32>) -> tensor<2x4x64xf32>
    %44 = graph.mul %33, %43 : (tensor<2x4x64xf32>, tensor<2x4x64xf32>) -> tensor<2x4x64xf32>
    %45 = graph.matmul %44, %arg12 : (tensor<2x4x64xf32>, tensor<64x16xf32>) -> tensor<2x4x16xf32>
    %46 = graph.add %arg13, %45 : (tensor<16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
    %47 = graph.add %28, %46 : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
    %48 = graph.layer_norm %47, %arg14, %arg15 {axis = 2 : i64, epsilon = 9.9999997473787516E-6 : f64} : tensor<2x4x16xf32>, tensor<16xf32>, tensor<16xf32>
    %49 = graph.transpose %arg0 {perm = array<i64: 1, 0>} : tensor<32x16xf32> -> tensor<16x32xf32>
    %50 = graph.matmul %48, %49 : (tensor<2x4x16xf32>, tensor<16x32xf32>) -> tensor<2x4x32xf32>
    return %50 : tensor<2x4x32xf32>
  }
}
