// Written by make_rms_norm_mlir.py: rms_norm (eps 1e-06) for qwen3_tied's shapes.
module @rms_norm_kernels {
  func.func public @rms_norm_1x64_64(%x: tensor<1x64xf32>, %w: tensor<64xf32>) -> tensor<1x64xf32> {
    %xg = "stablehlo.reshape"(%x) : (tensor<1x64xf32>) -> tensor<1x64xf32>
    %sq = "stablehlo.multiply"(%xg, %xg) : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
    %zero = "stablehlo.constant"() {value = dense<0.00000000e+00> : tensor<f32>} : () -> tensor<f32>
    %sum = "stablehlo.reduce"(%sq, %zero) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%c) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<1x64xf32>, tensor<f32>) -> tensor<1xf32>
    %n = "stablehlo.constant"() {value = dense<6.40000000e+01> : tensor<1xf32>} : () -> tensor<1xf32>
    %mean = "stablehlo.divide"(%sum, %n) : (tensor<1xf32>, tensor<1xf32>) -> tensor<1xf32>
    %eps = "stablehlo.constant"() {value = dense<1.00000000e-06> : tensor<1xf32>} : () -> tensor<1xf32>
    %var = "stablehlo.add"(%mean, %eps) : (tensor<1xf32>, tensor<1xf32>) -> tensor<1xf32>
    %sd = "stablehlo.sqrt"(%var) : (tensor<1xf32>) -> tensor<1xf32>
    %one = "stablehlo.constant"() {value = dense<1.00000000e+00> : tensor<1xf32>} : () -> tensor<1xf32>
    %inv = "stablehlo.divide"(%one, %sd) : (tensor<1xf32>, tensor<1xf32>) -> tensor<1xf32>
    %invb = "stablehlo.broadcast_in_dim"(%inv) {broadcast_dimensions = array<i64: 0>} : (tensor<1xf32>) -> tensor<1x64xf32>
    %y0 = "stablehlo.multiply"(%xg, %invb) : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
    %wb = "stablehlo.broadcast_in_dim"(%w) {broadcast_dimensions = array<i64: 1>} : (tensor<64xf32>) -> tensor<1x64xf32>
    %y1 = "stablehlo.multiply"(%y0, %wb) : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
    %y = "stablehlo.reshape"(%y1) : (tensor<1x64xf32>) -> tensor<1x64xf32>
    "func.return"(%y) : (tensor<1x64xf32>) -> ()
  }
  func.func public @rms_norm_1x128_32(%x: tensor<1x128xf32>, %w: tensor<32xf32>) -> tensor<1x128xf32> {
    %xg = "stablehlo.reshape"(%x) : (tensor<1x128xf32>) -> tensor<4x32xf32>
    %sq = "stablehlo.multiply"(%xg, %xg) : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
    %zero = "stablehlo.constant"() {value = dense<0.00000000e+00> : tensor<f32>} : () -> tensor<f32>
    %sum = "stablehlo.reduce"(%sq, %zero) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%c) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<4x32xf32>, tensor<f32>) -> tensor<4xf32>
    %n = "stablehlo.constant"() {value = dense<3.20000000e+01> : tensor<4xf32>} : () -> tensor<4xf32>
    %mean = "stablehlo.divide"(%sum, %n) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %eps = "stablehlo.constant"() {value = dense<1.00000000e-06> : tensor<4xf32>} : () -> tensor<4xf32>
    %var = "stablehlo.add"(%mean, %eps) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %sd = "stablehlo.sqrt"(%var) : (tensor<4xf32>) -> tensor<4xf32>
    %one = "stablehlo.constant"() {value = dense<1.00000000e+00> : tensor<4xf32>} : () -> tensor<4xf32>
    %inv = "stablehlo.divide"(%one, %sd) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %invb = "stablehlo.broadcast_in_dim"(%inv) {broadcast_dimensions = array<i64: 0>} : (tensor<4xf32>) -> tensor<4x32xf32>
    %y0 = "stablehlo.multiply"(%xg, %invb) : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
    %wb = "stablehlo.broadcast_in_dim"(%w) {broadcast_dimensions = array<i64: 1>} : (tensor<32xf32>) -> tensor<4x32xf32>
    %y1 = "stablehlo.multiply"(%y0, %wb) : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
    %y = "stablehlo.reshape"(%y1) : (tensor<4x32xf32>) -> tensor<1x128xf32>
    "func.return"(%y) : (tensor<1x128xf32>) -> ()
  }
  func.func public @rms_norm_1x64_32(%x: tensor<1x64xf32>, %w: tensor<32xf32>) -> tensor<1x64xf32> {
    %xg = "stablehlo.reshape"(%x) : (tensor<1x64xf32>) -> tensor<2x32xf32>
    %sq = "stablehlo.multiply"(%xg, %xg) : (tensor<2x32xf32>, tensor<2x32xf32>) -> tensor<2x32xf32>
    %zero = "stablehlo.constant"() {value = dense<0.00000000e+00> : tensor<f32>} : () -> tensor<f32>
    %sum = "stablehlo.reduce"(%sq, %zero) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%c) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x32xf32>, tensor<f32>) -> tensor<2xf32>
    %n = "stablehlo.constant"() {value = dense<3.20000000e+01> : tensor<2xf32>} : () -> tensor<2xf32>
    %mean = "stablehlo.divide"(%sum, %n) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %eps = "stablehlo.constant"() {value = dense<1.00000000e-06> : tensor<2xf32>} : () -> tensor<2xf32>
    %var = "stablehlo.add"(%mean, %eps) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %sd = "stablehlo.sqrt"(%var) : (tensor<2xf32>) -> tensor<2xf32>
    %one = "stablehlo.constant"() {value = dense<1.00000000e+00> : tensor<2xf32>} : () -> tensor<2xf32>
    %inv = "stablehlo.divide"(%one, %sd) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %invb = "stablehlo.broadcast_in_dim"(%inv) {broadcast_dimensions = array<i64: 0>} : (tensor<2xf32>) -> tensor<2x32xf32>
    %y0 = "stablehlo.multiply"(%xg, %invb) : (tensor<2x32xf32>, tensor<2x32xf32>) -> tensor<2x32xf32>
    %wb = "stablehlo.broadcast_in_dim"(%w) {broadcast_dimensions = array<i64: 1>} : (tensor<32xf32>) -> tensor<2x32xf32>
    %y1 = "stablehlo.multiply"(%y0, %wb) : (tensor<2x32xf32>, tensor<2x32xf32>) -> tensor<2x32xf32>
    %y = "stablehlo.reshape"(%y1) : (tensor<2x32xf32>) -> tensor<1x64xf32>
    "func.return"(%y) : (tensor<1x64xf32>) -> ()
  }
  func.func public @rms_norm_7x64_64(%x: tensor<7x64xf32>, %w: tensor<64xf32>) -> tensor<7x64xf32> {
    %xg = "stablehlo.reshape"(%x) : (tensor<7x64xf32>) -> tensor<7x64xf32>
    %sq = "stablehlo.multiply"(%xg, %xg) : (tensor<7x64xf32>, tensor<7x64xf32>) -> tensor<7x64xf32>
    %zero = "stablehlo.constant"() {value = dense<0.00000000e+00> : tensor<f32>} : () -> tensor<f32>
    %sum = "stablehlo.reduce"(%sq, %zero) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%c) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<7x64xf32>, tensor<f32>) -> tensor<7xf32>
    %n = "stablehlo.constant"() {value = dense<6.40000000e+01> : tensor<7xf32>} : () -> tensor<7xf32>
    %mean = "stablehlo.divide"(%sum, %n) : (tensor<7xf32>, tensor<7xf32>) -> tensor<7xf32>
    %eps = "stablehlo.constant"() {value = dense<1.00000000e-06> : tensor<7xf32>} : () -> tensor<7xf32>
    %var = "stablehlo.add"(%mean, %eps) : (tensor<7xf32>, tensor<7xf32>) -> tensor<7xf32>
    %sd = "stablehlo.sqrt"(%var) : (tensor<7xf32>) -> tensor<7xf32>
    %one = "stablehlo.constant"() {value = dense<1.00000000e+00> : tensor<7xf32>} : () -> tensor<7xf32>
    %inv = "stablehlo.divide"(%one, %sd) : (tensor<7xf32>, tensor<7xf32>) -> tensor<7xf32>
    %invb = "stablehlo.broadcast_in_dim"(%inv) {broadcast_dimensions = array<i64: 0>} : (tensor<7xf32>) -> tensor<7x64xf32>
    %y0 = "stablehlo.multiply"(%xg, %invb) : (tensor<7x64xf32>, tensor<7x64xf32>) -> tensor<7x64xf32>
    %wb = "stablehlo.broadcast_in_dim"(%w) {broadcast_dimensions = array<i64: 1>} : (tensor<64xf32>) -> tensor<7x64xf32>
    %y1 = "stablehlo.multiply"(%y0, %wb) : (tensor<7x64xf32>, tensor<7x64xf32>) -> tensor<7x64xf32>
    %y = "stablehlo.reshape"(%y1) : (tensor<7x64xf32>) -> tensor<7x64xf32>
    "func.return"(%y) : (tensor<7x64xf32>) -> ()
  }
  func.func public @rms_norm_7x128_32(%x: tensor<7x128xf32>, %w: tensor<32xf32>) -> tensor<7x128xf32> {
    %xg = "stablehlo.reshape"(%x) : (tensor<7x128xf32>) -> tensor<28x32xf32>
    %sq = "stablehlo.multiply"(%xg, %xg) : (tensor<28x32xf32>, tensor<28x32xf32>) -> tensor<28x32xf32>
    %zero = "stablehlo.constant"() {value = dense<0.00000000e+00> : tensor<f32>} : () -> tensor<f32>
    %sum = "stablehlo.reduce"(%sq, %zero) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%c) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<28x32xf32>, tensor<f32>) -> tensor<28xf32>
    %n = "stablehlo.constant"() {value = dense<3.20000000e+01> : tensor<28xf32>} : () -> tensor<28xf32>
    %mean = "stablehlo.divide"(%sum, %n) : (tensor<28xf32>, tensor<28xf32>) -> tensor<28xf32>
    %eps = "stablehlo.constant"() {value = dense<1.00000000e-06> : tensor<28xf32>} : () -> tensor<28xf32>
    %var = "stablehlo.add"(%mean, %eps) : (tensor<28xf32>, tensor<28xf32>) -> tensor<28xf32>
    %sd = "stablehlo.sqrt"(%var) : (tensor<28xf32>) -> tensor<28xf32>
    %one = "stablehlo.constant"() {value = dense<1.00000000e+00> : tensor<28xf32>} : () -> tensor<28xf32>
    %inv = "stablehlo.divide"(%one, %sd) : (tensor<28xf32>, tensor<28xf32>) -> tensor<28xf32>
    %invb = "stablehlo.broadcast_in_dim"(%inv) {broadcast_dimensions = array<i64: 0>} : (tensor<28xf32>) -> tensor<28x32xf32>
    %y0 = "stablehlo.multiply"(%xg, %invb) : (tensor<28x32xf32>, tensor<28x32xf32>) -> tensor<28x32xf32>
    %wb = "stablehlo.broadcast_in_dim"(%w) {broadcast_dimensions = array<i64: 1>} : (tensor<32xf32>) -> tensor<28x32xf32>
    %y1 = "stablehlo.multiply"(%y0, %wb) : (tensor<28x32xf32>, tensor<28x32xf32>) -> tensor<28x32xf32>
    %y = "stablehlo.reshape"(%y1) : (tensor<28x32xf32>) -> tensor<7x128xf32>
    "func.return"(%y) : (tensor<7x128xf32>) -> ()
  }
  func.func public @rms_norm_7x64_32(%x: tensor<7x64xf32>, %w: tensor<32xf32>) -> tensor<7x64xf32> {
    %xg = "stablehlo.reshape"(%x) : (tensor<7x64xf32>) -> tensor<14x32xf32>
    %sq = "stablehlo.multiply"(%xg, %xg) : (tensor<14x32xf32>, tensor<14x32xf32>) -> tensor<14x32xf32>
    %zero = "stablehlo.constant"() {value = dense<0.00000000e+00> : tensor<f32>} : () -> tensor<f32>
    %sum = "stablehlo.reduce"(%sq, %zero) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%c) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<14x32xf32>, tensor<f32>) -> tensor<14xf32>
    %n = "stablehlo.constant"() {value = dense<3.20000000e+01> : tensor<14xf32>} : () -> tensor<14xf32>
    %mean = "stablehlo.divide"(%sum, %n) : (tensor<14xf32>, tensor<14xf32>) -> tensor<14xf32>
    %eps = "stablehlo.constant"() {value = dense<1.00000000e-06> : tensor<14xf32>} : () -> tensor<14xf32>
    %var = "stablehlo.add"(%mean, %eps) : (tensor<14xf32>, tensor<14xf32>) -> tensor<14xf32>
    %sd = "stablehlo.sqrt"(%var) : (tensor<14xf32>) -> tensor<14xf32>
    %one = "stablehlo.constant"() {value = dense<1.00000000e+00> : tensor<14xf32>} : () -> tensor<14xf32>
    %inv = "stablehlo.divide"(%one, %sd) : (tensor<14xf32>, tensor<14xf32>) -> tensor<14xf32>
    %invb = "stablehlo.broadcast_in_dim"(%inv) {broadcast_dimensions = array<i64: 0>} : (tensor<14xf32>) -> tensor<14x32xf32>
    %y0 = "stablehlo.multiply"(%xg, %invb) : (tensor<14x32xf32>, tensor<14x32xf32>) -> tensor<14x32xf32>
    %wb = "stablehlo.broadcast_in_dim"(%w) {broadcast_dimensions = array<i64: 1>} : (tensor<32xf32>) -> tensor<14x32xf32>
    %y1 = "stablehlo.multiply"(%y0, %wb) : (tensor<14x32xf32>, tensor<14x32xf32>) -> tensor<14x32xf32>
    %y = "stablehlo.reshape"(%y1) : (tensor<14x32xf32>) -> tensor<7x64xf32>
    "func.return"(%y) : (tensor<7x64xf32>) -> ()
  }
  func.func public @rms_norm_16x64_64(%x: tensor<16x64xf32>, %w: tensor<64xf32>) -> tensor<16x64xf32> {
    %xg = "stablehlo.reshape"(%x) : (tensor<16x64xf32>) -> tensor<16x64xf32>
    %sq = "stablehlo.multiply"(%xg, %xg) : (tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<16x64xf32>
    %zero = "stablehlo.constant"() {value = dense<0.00000000e+00> : tensor<f32>} : () -> tensor<f32>
    %sum = "stablehlo.reduce"(%sq, %zero) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%c) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<16x64xf32>, tensor<f32>) -> tensor<16xf32>
    %n = "stablehlo.constant"() {value = dense<6.40000000e+01> : tensor<16xf32>} : () -> tensor<16xf32>
    %mean = "stablehlo.divide"(%sum, %n) : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
    %eps = "stablehlo.constant"() {value = dense<1.00000000e-06> : tensor<16xf32>} : () -> tensor<16xf32>
    %var = "stablehlo.add"(%mean, %eps) : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
    %sd = "stablehlo.sqrt"(%var) : (tensor<16xf32>) -> tensor<16xf32>
    %one = "stablehlo.constant"() {value = dense<1.00000000e+00> : tensor<16xf32>} : () -> tensor<16xf32>
    %inv = "stablehlo.divide"(%one, %sd) : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
    %invb = "stablehlo.broadcast_in_dim"(%inv) {broadcast_dimensions = array<i64: 0>} : (tensor<16xf32>) -> tensor<16x64xf32>
    %y0 = "stablehlo.multiply"(%xg, %invb) : (tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<16x64xf32>
    %wb = "stablehlo.broadcast_in_dim"(%w) {broadcast_dimensions = array<i64: 1>} : (tensor<64xf32>) -> tensor<16x64xf32>
    %y1 = "stablehlo.multiply"(%y0, %wb) : (tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<16x64xf32>
    %y = "stablehlo.reshape"(%y1) : (tensor<16x64xf32>) -> tensor<16x64xf32>
    "func.return"(%y) : (tensor<16x64xf32>) -> ()
  }
  func.func public @rms_norm_16x128_32(%x: tensor<16x128xf32>, %w: tensor<32xf32>) -> tensor<16x128xf32> {
    %xg = "stablehlo.reshape"(%x) : (tensor<16x128xf32>) -> tensor<64x32xf32>
    %sq = "stablehlo.multiply"(%xg, %xg) : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
    %zero = "stablehlo.constant"() {value = dense<0.00000000e+00> : tensor<f32>} : () -> tensor<f32>
    %sum = "stablehlo.reduce"(%sq, %zero) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%c) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<64x32xf32>, tensor<f32>) -> tensor<64xf32>
    %n = "stablehlo.constant"() {value = dense<3.20000000e+01> : tensor<64xf32>} : () -> tensor<64xf32>
    %mean = "stablehlo.divide"(%sum, %n) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
    %eps = "stablehlo.constant"() {value = dense<1.00000000e-06> : tensor<64xf32>} : () -> tensor<64xf32>
    %var = "stablehlo.add"(%mean, %eps) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
    %sd = "stablehlo.sqrt"(%var) : (tensor<64xf32>) -> tensor<64xf32>
    %one = "stablehlo.constant"() {value = dense<1.00000000e+00> : tensor<64xf32>} : () -> tensor<64xf32>
    %inv = "stablehlo.divide"(%one, %sd) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
    %invb = "stablehlo.broadcast_in_dim"(%inv) {broadcast_dimensions = array<i64: 0>} : (tensor<64xf32>) -> tensor<64x32xf32>
    %y0 = "stablehlo.multiply"(%xg, %invb) : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
    %wb = "stablehlo.broadcast_in_dim"(%w) {broadcast_dimensions = array<i64: 1>} : (tensor<32xf32>) -> tensor<64x32xf32>
    %y1 = "stablehlo.multiply"(%y0, %wb) : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
    %y = "stablehlo.reshape"(%y1) : (tensor<64x32xf32>) -> tensor<16x128xf32>
    "func.return"(%y) : (tensor<16x128xf32>) -> ()
  }
  func.func public @rms_norm_16x64_32(%x: tensor<16x64xf32>, %w: tensor<32xf32>) -> tensor<16x64xf32> {
    %xg = "stablehlo.reshape"(%x) : (tensor<16x64xf32>) -> tensor<32x32xf32>
    %sq = "stablehlo.multiply"(%xg, %xg) : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
    %zero = "stablehlo.constant"() {value = dense<0.00000000e+00> : tensor<f32>} : () -> tensor<f32>
    %sum = "stablehlo.reduce"(%sq, %zero) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%c) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<32x32xf32>, tensor<f32>) -> tensor<32xf32>
    %n = "stablehlo.constant"() {value = dense<3.20000000e+01> : tensor<32xf32>} : () -> tensor<32xf32>
    %mean = "stablehlo.divide"(%sum, %n) : (tensor<32xf32>, tensor<32xf32>) -> tensor<32xf32>
    %eps = "stablehlo.constant"() {value = dense<1.00000000e-06> : tensor<32xf32>} : () -> tensor<32xf32>
    %var = "stablehlo.add"(%mean, %eps) : (tensor<32xf32>, tensor<32xf32>) -> tensor<32xf32>
    %sd = "stablehlo.sqrt"(%var) : (tensor<32xf32>) -> tensor<32xf32>
    %one = "stablehlo.constant"() {value = dense<1.00000000e+00> : tensor<32xf32>} : () -> tensor<32xf32>
    %inv = "stablehlo.divide"(%one, %sd) : (tensor<32xf32>, tensor<32xf32>) -> tensor<32xf32>
    %invb = "stablehlo.broadcast_in_dim"(%inv) {broadcast_dimensions = array<i64: 0>} : (tensor<32xf32>) -> tensor<32x32xf32>
    %y0 = "stablehlo.multiply"(%xg, %invb) : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
    %wb = "stablehlo.broadcast_in_dim"(%w) {broadcast_dimensions = array<i64: 1>} : (tensor<32xf32>) -> tensor<32x32xf32>
    %y1 = "stablehlo.multiply"(%y0, %wb) : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
    %y = "stablehlo.reshape"(%y1) : (tensor<32x32xf32>) -> tensor<16x64xf32>
    "func.return"(%y) : (tensor<16x64xf32>) -> ()
  }
  func.func public @rms_norm_19x64_64(%x: tensor<19x64xf32>, %w: tensor<64xf32>) -> tensor<19x64xf32> {
    %xg = "stablehlo.reshape"(%x) : (tensor<19x64xf32>) -> tensor<19x64xf32>
    %sq = "stablehlo.multiply"(%xg, %xg) : (tensor<19x64xf32>, tensor<19x64xf32>) -> tensor<19x64xf32>
    %zero = "stablehlo.constant"() {value = dense<0.00000000e+00> : tensor<f32>} : () -> tensor<f32>
    %sum = "stablehlo.reduce"(%sq, %zero) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%c) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<19x64xf32>, tensor<f32>) -> tensor<19xf32>
    %n = "stablehlo.constant"() {value = dense<6.40000000e+01> : tensor<19xf32>} : () -> tensor<19xf32>
    %mean = "stablehlo.divide"(%sum, %n) : (tensor<19xf32>, tensor<19xf32>) -> tensor<19xf32>
    %eps = "stablehlo.constant"() {value = dense<1.00000000e-06> : tensor<19xf32>} : () -> tensor<19xf32>
    %var = "stablehlo.add"(%mean, %eps) : (tensor<19xf32>, tensor<19xf32>) -> tensor<19xf32>
    %sd = "stablehlo.sqrt"(%var) : (tensor<19xf32>) -> tensor<19xf32>
    %one = "stablehlo.constant"() {value = dense<1.00000000e+00> : tensor<19xf32>} : () -> tensor<19xf32>
    %inv = "stablehlo.divide"(%one, %sd) : (tensor<19xf32>, tensor<19xf32>) -> tensor<19xf32>
    %invb = "stablehlo.broadcast_in_dim"(%inv) {broadcast_dimensions = array<i64: 0>} : (tensor<19xf32>) -> tensor<19x64xf32>
    %y0 = "stablehlo.multiply"(%xg, %invb) : (tensor<19x64xf32>, tensor<19x64xf32>) -> tensor<19x64xf32>
    %wb = "stablehlo.broadcast_in_dim"(%w) {broadcast_dimensions = array<i64: 1>} : (tensor<64xf32>) -> tensor<19x64xf32>
    %y1 = "stablehlo.multiply"(%y0, %wb) : (tensor<19x64xf32>, tensor<19x64xf32>) -> tensor<19x64xf32>
    %y = "stablehlo.reshape"(%y1) : (tensor<19x64xf32>) -> tensor<19x64xf32>
    "func.return"(%y) : (tensor<19x64xf32>) -> ()
  }
  func.func public @rms_norm_19x128_32(%x: tensor<19x128xf32>, %w: tensor<32xf32>) -> tensor<19x128xf32> {
    %xg = "stablehlo.reshape"(%x) : (tensor<19x128xf32>) -> tensor<76x32xf32>
    %sq = "stablehlo.multiply"(%xg, %xg) : (tensor<76x32xf32>, tensor<76x32xf32>) -> tensor<76x32xf32>
    %zero = "stablehlo.constant"() {value = dense<0.00000000e+00> : tensor<f32>} : () -> tensor<f32>
    %sum = "stablehlo.reduce"(%sq, %zero) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%c) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<76x32xf32>, tensor<f32>) -> tensor<76xf32>
    %n = "stablehlo.constant"() {value = dense<3.20000000e+01> : tensor<76xf32>} : () -> tensor<76xf32>
    %mean = "stablehlo.divide"(%sum, %n) : (tensor<76xf32>, tensor<76xf32>) -> tensor<76xf32>
    %eps = "stablehlo.constant"() {value = dense<1.00000000e-06> : tensor<76xf32>} : () -> tensor<76xf32>
    %var = "stablehlo.add"(%mean, %eps) : (tensor<76xf32>, tensor<76xf32>) -> tensor<76xf32>
    %sd = "stablehlo.sqrt"(%var) : (tensor<76xf32>) -> tensor<76xf32>
    %one = "stablehlo.constant"() {value = dense<1.00000000e+00> : tensor<76xf32>} : () -> tensor<76xf32>
    %inv = "stablehlo.divide"(%one, %sd) : (tensor<76xf32>, tensor<76xf32>) -> tensor<76xf32>
    %invb = "stablehlo.broadcast_in_dim"(%inv) {broadcast_dimensions = array<i64: 0>} : (tensor<76xf32>) -> tensor<76x32xf32>
    %y0 = "stablehlo.multiply"(%xg, %invb) : (tensor<76x32xf32>, tensor<76x32xf32>) -> tensor<76x32xf32>
    %wb = "stablehlo.broadcast_in_dim"(%w) {broadcast_dimensions = array<i64: 1>} : (tensor<32xf32>) -> tensor<76x32xf32>
    %y1 = "stablehlo.multiply"(%y0, %wb) : (tensor<76x32xf32>, tensor<76x32xf32>) -> tensor<76x32xf32>
    %y = "stablehlo.reshape"(%y1) : (tensor<76x32xf32>) -> tensor<19x128xf32>
    "func.return"(%y) : (tensor<19x128xf32>) -> ()
  }
  func.func public @rms_norm_19x64_32(%x: tensor<19x64xf32>, %w: tensor<32xf32>) -> tensor<19x64xf32> {
    %xg = "stablehlo.reshape"(%x) : (tensor<19x64xf32>) -> tensor<38x32xf32>
    %sq = "stablehlo.multiply"(%xg, %xg) : (tensor<38x32xf32>, tensor<38x32xf32>) -> tensor<38x32xf32>
    %zero = "stablehlo.constant"() {value = dense<0.00000000e+00> : tensor<f32>} : () -> tensor<f32>
    %sum = "stablehlo.reduce"(%sq, %zero) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = "stablehlo.add"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%c) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<38x32xf32>, tensor<f32>) -> tensor<38xf32>
    %n = "stablehlo.constant"() {value = dense<3.20000000e+01> : tensor<38xf32>} : () -> tensor<38xf32>
    %mean = "stablehlo.divide"(%sum, %n) : (tensor<38xf32>, tensor<38xf32>) -> tensor<38xf32>
    %eps = "stablehlo.constant"() {value = dense<1.00000000e-06> : tensor<38xf32>} : () -> tensor<38xf32>
    %var = "stablehlo.add"(%mean, %eps) : (tensor<38xf32>, tensor<38xf32>) -> tensor<38xf32>
    %sd = "stablehlo.sqrt"(%var) : (tensor<38xf32>) -> tensor<38xf32>
    %one = "stablehlo.constant"() {value = dense<1.00000000e+00> : tensor<38xf32>} : () -> tensor<38xf32>
    %inv = "stablehlo.divide"(%one, %sd) : (tensor<38xf32>, tensor<38xf32>) -> tensor<38xf32>
    %invb = "stablehlo.broadcast_in_dim"(%inv) {broadcast_dimensions = array<i64: 0>} : (tensor<38xf32>) -> tensor<38x32xf32>
    %y0 = "stablehlo.multiply"(%xg, %invb) : (tensor<38x32xf32>, tensor<38x32xf32>) -> tensor<38x32xf32>
    %wb = "stablehlo.broadcast_in_dim"(%w) {broadcast_dimensions = array<i64: 1>} : (tensor<32xf32>) -> tensor<38x32xf32>
    %y1 = "stablehlo.multiply"(%y0, %wb) : (tensor<38x32xf32>, tensor<38x32xf32>) -> tensor<38x32xf32>
    %y = "stablehlo.reshape"(%y1) : (tensor<38x32xf32>) -> tensor<19x64xf32>
    "func.return"(%y) : (tensor<19x64xf32>) -> ()
  }
}
