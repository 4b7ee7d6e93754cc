// Written by make_rms_norm_ffi_mlir.py: rms_norm (eps 1e-06) for qwen3_tied's shapes, as FFI calls.
module @rms_norm_ffi_kernels {
  func.func public @rms_norm_1x64_64(%x: tensor<1x64xf32>, %w: tensor<64xf32>) -> tensor<1x64xf32> {
    %y = stablehlo.custom_call @tessera_rms_norm_f32(%x, %w) {api_version = 4 : i32, backend_config = {eps = 1.000000e-06 : f32}} : (tensor<1x64xf32>, tensor<64xf32>) -> tensor<1x64xf32>
    return %y : tensor<1x64xf32>
  }
  func.func public @rms_norm_1x128_32(%x: tensor<1x128xf32>, %w: tensor<32xf32>) -> tensor<1x128xf32> {
    %y = stablehlo.custom_call @tessera_rms_norm_f32(%x, %w) {api_version = 4 : i32, backend_config = {eps = 1.000000e-06 : f32}} : (tensor<1x128xf32>, tensor<32xf32>) -> tensor<1x128xf32>
    return %y : tensor<1x128xf32>
  }
  func.func public @rms_norm_1x64_32(%x: tensor<1x64xf32>, %w: tensor<32xf32>) -> tensor<1x64xf32> {
    %y = stablehlo.custom_call @tessera_rms_norm_f32(%x, %w) {api_version = 4 : i32, backend_config = {eps = 1.000000e-06 : f32}} : (tensor<1x64xf32>, tensor<32xf32>) -> tensor<1x64xf32>
    return %y : tensor<1x64xf32>
  }
  func.func public @rms_norm_7x64_64(%x: tensor<7x64xf32>, %w: tensor<64xf32>) -> tensor<7x64xf32> {
    %y = stablehlo.custom_call @tessera_rms_norm_f32(%x, %w) {api_version = 4 : i32, backend_config = {eps = 1.000000e-06 : f32}} : (tensor<7x64xf32>, tensor<64xf32>) -> tensor<7x64xf32>
    return %y : tensor<7x64xf32>
  }
  func.func public @rms_norm_7x128_32(%x: tensor<7x128xf32>, %w: tensor<32xf32>) -> tensor<7x128xf32> {
    %y = stablehlo.custom_call @tessera_rms_norm_f32(%x, %w) {api_version = 4 : i32, backend_config = {eps = 1.000000e-06 : f32}} : (tensor<7x128xf32>, tensor<32xf32>) -> tensor<7x128xf32>
    return %y : tensor<7x128xf32>
  }
  func.func public @rms_norm_7x64_32(%x: tensor<7x64xf32>, %w: tensor<32xf32>) -> tensor<7x64xf32> {
    %y = stablehlo.custom_call @tessera_rms_norm_f32(%x, %w) {api_version = 4 : i32, backend_config = {eps = 1.000000e-06 : f32}} : (tensor<7x64xf32>, tensor<32xf32>) -> tensor<7x64xf32>
    return %y : tensor<7x64xf32>
  }
  func.func public @rms_norm_16x64_64(%x: tensor<16x64xf32>, %w: tensor<64xf32>) -> tensor<16x64xf32> {
    %y = stablehlo.custom_call @tessera_rms_norm_f32(%x, %w) {api_version = 4 : i32, backend_config = {eps = 1.000000e-06 : f32}} : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
    return %y : tensor<16x64xf32>
  }
  func.func public @rms_norm_16x128_32(%x: tensor<16x128xf32>, %w: tensor<32xf32>) -> tensor<16x128xf32> {
    %y = stablehlo.custom_call @tessera_rms_norm_f32(%x, %w) {api_version = 4 : i32, backend_config = {eps = 1.000000e-06 : f32}} : (tensor<16x128xf32>, tensor<32xf32>) -> tensor<16x128xf32>
    return %y : tensor<16x128xf32>
  }
  func.func public @rms_norm_16x64_32(%x: tensor<16x64xf32>, %w: tensor<32xf32>) -> tensor<16x64xf32> {
    %y = stablehlo.custom_call @tessera_rms_norm_f32(%x, %w) {api_version = 4 : i32, backend_config = {eps = 1.000000e-06 : f32}} : (tensor<16x64xf32>, tensor<32xf32>) -> tensor<16x64xf32>
    return %y : tensor<16x64xf32>
  }
  func.func public @rms_norm_19x64_64(%x: tensor<19x64xf32>, %w: tensor<64xf32>) -> tensor<19x64xf32> {
    %y = stablehlo.custom_call @tessera_rms_norm_f32(%x, %w) {api_version = 4 : i32, backend_config = {eps = 1.000000e-06 : f32}} : (tensor<19x64xf32>, tensor<64xf32>) -> tensor<19x64xf32>
    return %y : tensor<19x64xf32>
  }
  func.func public @rms_norm_19x128_32(%x: tensor<19x128xf32>, %w: tensor<32xf32>) -> tensor<19x128xf32> {
    %y = stablehlo.custom_call @tessera_rms_norm_f32(%x, %w) {api_version = 4 : i32, backend_config = {eps = 1.000000e-06 : f32}} : (tensor<19x128xf32>, tensor<32xf32>) -> tensor<19x128xf32>
    return %y : tensor<19x128xf32>
  }
  func.func public @rms_norm_19x64_32(%x: tensor<19x64xf32>, %w: tensor<32xf32>) -> tensor<19x64xf32> {
    %y = stablehlo.custom_call @tessera_rms_norm_f32(%x, %w) {api_version = 4 : i32, backend_config = {eps = 1.000000e-06 : f32}} : (tensor<19x64xf32>, tensor<32xf32>) -> tensor<19x64xf32>
    return %y : tensor<19x64xf32>
  }
}
