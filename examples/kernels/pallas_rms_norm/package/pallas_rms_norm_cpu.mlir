// Exported by tools/export_kernel.py with jax 0.10.2 for platform cpu: rms_norm from rms_norm.py
module @pallas_rms_norm {
  func.func public @main_1x64_64(%arg0: tensor<1x64xf32>, %arg1: tensor<64xf32>) -> (tensor<1x64xf32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_0 = stablehlo.constant dense<9.99999997E-7> : tensor<f32>
    %cst_1 = stablehlo.constant dense<6.400000e+01> : tensor<f32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c = stablehlo.constant dense<64> : tensor<i32>
    %c_3 = stablehlo.constant dense<1> : tensor<i32>
    %c_4 = stablehlo.constant dense<0> : tensor<i32>
    %cst_5 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
    %0 = stablehlo.reshape %arg1 : (tensor<64xf32>) -> tensor<1x64xf32>
    %1 = stablehlo.broadcast_in_dim %cst_5, dims = [] : (tensor<f32>) -> tensor<1x64xf32>
    %2:4 = stablehlo.while(%iterArg = %c_4, %iterArg_6 = %arg0, %iterArg_7 = %0, %iterArg_8 = %1) : tensor<i32>, tensor<1x64xf32>, tensor<1x64xf32>, tensor<1x64xf32>
    cond {
      %3 = stablehlo.compare LT, %iterArg, %c_3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %3 : tensor<i1>
    } do {
      %3 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %4 = stablehlo.add %c_4, %c_3 : tensor<i32>
      %5 = stablehlo.select %3, %4, %c_4 : tensor<i1>, tensor<i32>
      %6 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %7 = stablehlo.add %c_4, %c : tensor<i32>
      %8 = stablehlo.select %6, %7, %c_4 : tensor<i1>, tensor<i32>
      %9 = stablehlo.dynamic_slice %iterArg_6, %5, %8, sizes = [1, 64] : (tensor<1x64xf32>, tensor<i32>, tensor<i32>) -> tensor<1x64xf32>
      %10 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %11 = stablehlo.add %c_4, %c_3 : tensor<i32>
      %12 = stablehlo.select %10, %11, %c_4 : tensor<i1>, tensor<i32>
      %13 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %14 = stablehlo.add %c_4, %c : tensor<i32>
      %15 = stablehlo.select %13, %14, %c_4 : tensor<i1>, tensor<i32>
      %16 = stablehlo.dynamic_slice %iterArg_7, %12, %15, sizes = [1, 64] : (tensor<1x64xf32>, tensor<i32>, tensor<i32>) -> tensor<1x64xf32>
      %17 = stablehlo.multiply %9, %9 : tensor<1x64xf32>
      %18 = stablehlo.reduce(%17 init: %cst_2) applies stablehlo.add across dimensions = [1] : (tensor<1x64xf32>, tensor<f32>) -> tensor<1xf32>
      %19 = stablehlo.broadcast_in_dim %18, dims = [0] : (tensor<1xf32>) -> tensor<1x1xf32>
      %20 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<1x1xf32>
      %21 = stablehlo.divide %19, %20 : tensor<1x1xf32>
      %22 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<1x1xf32>
      %23 = stablehlo.add %21, %22 : tensor<1x1xf32>
      %24 = stablehlo.sqrt %23 : tensor<1x1xf32>
      %25 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<1x1xf32>
      %26 = stablehlo.divide %25, %24 : tensor<1x1xf32>
      %27 = stablehlo.broadcast_in_dim %26, dims = [0, 1] : (tensor<1x1xf32>) -> tensor<1x64xf32>
      %28 = stablehlo.multiply %9, %27 : tensor<1x64xf32>
      %29 = stablehlo.multiply %28, %16 : tensor<1x64xf32>
      %30 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %31 = stablehlo.add %c_4, %c_3 : tensor<i32>
      %32 = stablehlo.select %30, %31, %c_4 : tensor<i1>, tensor<i32>
      %33 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %34 = stablehlo.add %c_4, %c : tensor<i32>
      %35 = stablehlo.select %33, %34, %c_4 : tensor<i1>, tensor<i32>
      %36 = stablehlo.dynamic_update_slice %iterArg_6, %9, %32, %35 : (tensor<1x64xf32>, tensor<1x64xf32>, tensor<i32>, tensor<i32>) -> tensor<1x64xf32>
      %37 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %38 = stablehlo.add %c_4, %c_3 : tensor<i32>
      %39 = stablehlo.select %37, %38, %c_4 : tensor<i1>, tensor<i32>
      %40 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %41 = stablehlo.add %c_4, %c : tensor<i32>
      %42 = stablehlo.select %40, %41, %c_4 : tensor<i1>, tensor<i32>
      %43 = stablehlo.dynamic_update_slice %iterArg_7, %16, %39, %42 : (tensor<1x64xf32>, tensor<1x64xf32>, tensor<i32>, tensor<i32>) -> tensor<1x64xf32>
      %44 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %45 = stablehlo.add %c_4, %c_3 : tensor<i32>
      %46 = stablehlo.select %44, %45, %c_4 : tensor<i1>, tensor<i32>
      %47 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %48 = stablehlo.add %c_4, %c : tensor<i32>
      %49 = stablehlo.select %47, %48, %c_4 : tensor<i1>, tensor<i32>
      %50 = stablehlo.dynamic_update_slice %iterArg_8, %29, %46, %49 : (tensor<1x64xf32>, tensor<1x64xf32>, tensor<i32>, tensor<i32>) -> tensor<1x64xf32>
      %51 = stablehlo.add %iterArg, %c_3 : tensor<i32>
      stablehlo.return %51, %36, %43, %50 : tensor<i32>, tensor<1x64xf32>, tensor<1x64xf32>, tensor<1x64xf32>
    }
    return %2#3 : tensor<1x64xf32>
  }
  func.func public @main_1x128_32(%arg0: tensor<1x128xf32>, %arg1: tensor<32xf32>) -> (tensor<1x128xf32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_0 = stablehlo.constant dense<9.99999997E-7> : tensor<f32>
    %cst_1 = stablehlo.constant dense<3.200000e+01> : tensor<f32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c = stablehlo.constant dense<32> : tensor<i32>
    %c_3 = stablehlo.constant dense<4> : tensor<i32>
    %c_4 = stablehlo.constant dense<1> : tensor<i32>
    %c_5 = stablehlo.constant dense<0> : tensor<i32>
    %cst_6 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
    %0 = stablehlo.reshape %arg0 : (tensor<1x128xf32>) -> tensor<4x32xf32>
    %1 = stablehlo.reshape %arg1 : (tensor<32xf32>) -> tensor<1x32xf32>
    %2 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<4x32xf32>
    %3:4 = stablehlo.while(%iterArg = %c_5, %iterArg_7 = %0, %iterArg_8 = %1, %iterArg_9 = %2) : tensor<i32>, tensor<4x32xf32>, tensor<1x32xf32>, tensor<4x32xf32>
    cond {
      %5 = stablehlo.compare LT, %iterArg, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %5 : tensor<i1>
    } do {
      %5 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %6 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %7 = stablehlo.select %5, %6, %c_5 : tensor<i1>, tensor<i32>
      %8 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %9 = stablehlo.add %c_5, %c : tensor<i32>
      %10 = stablehlo.select %8, %9, %c_5 : tensor<i1>, tensor<i32>
      %11 = stablehlo.dynamic_slice %iterArg_7, %7, %10, sizes = [4, 32] : (tensor<4x32xf32>, tensor<i32>, tensor<i32>) -> tensor<4x32xf32>
      %12 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %13 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %14 = stablehlo.select %12, %13, %c_5 : tensor<i1>, tensor<i32>
      %15 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %16 = stablehlo.add %c_5, %c : tensor<i32>
      %17 = stablehlo.select %15, %16, %c_5 : tensor<i1>, tensor<i32>
      %18 = stablehlo.dynamic_slice %iterArg_8, %14, %17, sizes = [1, 32] : (tensor<1x32xf32>, tensor<i32>, tensor<i32>) -> tensor<1x32xf32>
      %19 = stablehlo.multiply %11, %11 : tensor<4x32xf32>
      %20 = stablehlo.reduce(%19 init: %cst_2) applies stablehlo.add across dimensions = [1] : (tensor<4x32xf32>, tensor<f32>) -> tensor<4xf32>
      %21 = stablehlo.broadcast_in_dim %20, dims = [0] : (tensor<4xf32>) -> tensor<4x1xf32>
      %22 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<4x1xf32>
      %23 = stablehlo.divide %21, %22 : tensor<4x1xf32>
      %24 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<4x1xf32>
      %25 = stablehlo.add %23, %24 : tensor<4x1xf32>
      %26 = stablehlo.sqrt %25 : tensor<4x1xf32>
      %27 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x1xf32>
      %28 = stablehlo.divide %27, %26 : tensor<4x1xf32>
      %29 = stablehlo.broadcast_in_dim %28, dims = [0, 1] : (tensor<4x1xf32>) -> tensor<4x32xf32>
      %30 = stablehlo.multiply %11, %29 : tensor<4x32xf32>
      %31 = stablehlo.broadcast_in_dim %18, dims = [0, 1] : (tensor<1x32xf32>) -> tensor<4x32xf32>
      %32 = stablehlo.multiply %30, %31 : tensor<4x32xf32>
      %33 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %34 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %35 = stablehlo.select %33, %34, %c_5 : tensor<i1>, tensor<i32>
      %36 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %37 = stablehlo.add %c_5, %c : tensor<i32>
      %38 = stablehlo.select %36, %37, %c_5 : tensor<i1>, tensor<i32>
      %39 = stablehlo.dynamic_update_slice %iterArg_7, %11, %35, %38 : (tensor<4x32xf32>, tensor<4x32xf32>, tensor<i32>, tensor<i32>) -> tensor<4x32xf32>
      %40 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %41 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %42 = stablehlo.select %40, %41, %c_5 : tensor<i1>, tensor<i32>
      %43 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %44 = stablehlo.add %c_5, %c : tensor<i32>
      %45 = stablehlo.select %43, %44, %c_5 : tensor<i1>, tensor<i32>
      %46 = stablehlo.dynamic_update_slice %iterArg_8, %18, %42, %45 : (tensor<1x32xf32>, tensor<1x32xf32>, tensor<i32>, tensor<i32>) -> tensor<1x32xf32>
      %47 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %48 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %49 = stablehlo.select %47, %48, %c_5 : tensor<i1>, tensor<i32>
      %50 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %51 = stablehlo.add %c_5, %c : tensor<i32>
      %52 = stablehlo.select %50, %51, %c_5 : tensor<i1>, tensor<i32>
      %53 = stablehlo.dynamic_update_slice %iterArg_9, %32, %49, %52 : (tensor<4x32xf32>, tensor<4x32xf32>, tensor<i32>, tensor<i32>) -> tensor<4x32xf32>
      %54 = stablehlo.add %iterArg, %c_4 : tensor<i32>
      stablehlo.return %54, %39, %46, %53 : tensor<i32>, tensor<4x32xf32>, tensor<1x32xf32>, tensor<4x32xf32>
    }
    %4 = stablehlo.reshape %3#3 : (tensor<4x32xf32>) -> tensor<1x128xf32>
    return %4 : tensor<1x128xf32>
  }
  func.func public @main_1x64_32(%arg0: tensor<1x64xf32>, %arg1: tensor<32xf32>) -> (tensor<1x64xf32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_0 = stablehlo.constant dense<9.99999997E-7> : tensor<f32>
    %cst_1 = stablehlo.constant dense<3.200000e+01> : tensor<f32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c = stablehlo.constant dense<32> : tensor<i32>
    %c_3 = stablehlo.constant dense<2> : tensor<i32>
    %c_4 = stablehlo.constant dense<1> : tensor<i32>
    %c_5 = stablehlo.constant dense<0> : tensor<i32>
    %cst_6 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
    %0 = stablehlo.reshape %arg0 : (tensor<1x64xf32>) -> tensor<2x32xf32>
    %1 = stablehlo.reshape %arg1 : (tensor<32xf32>) -> tensor<1x32xf32>
    %2 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<2x32xf32>
    %3:4 = stablehlo.while(%iterArg = %c_5, %iterArg_7 = %0, %iterArg_8 = %1, %iterArg_9 = %2) : tensor<i32>, tensor<2x32xf32>, tensor<1x32xf32>, tensor<2x32xf32>
    cond {
      %5 = stablehlo.compare LT, %iterArg, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %5 : tensor<i1>
    } do {
      %5 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %6 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %7 = stablehlo.select %5, %6, %c_5 : tensor<i1>, tensor<i32>
      %8 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %9 = stablehlo.add %c_5, %c : tensor<i32>
      %10 = stablehlo.select %8, %9, %c_5 : tensor<i1>, tensor<i32>
      %11 = stablehlo.dynamic_slice %iterArg_7, %7, %10, sizes = [2, 32] : (tensor<2x32xf32>, tensor<i32>, tensor<i32>) -> tensor<2x32xf32>
      %12 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %13 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %14 = stablehlo.select %12, %13, %c_5 : tensor<i1>, tensor<i32>
      %15 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %16 = stablehlo.add %c_5, %c : tensor<i32>
      %17 = stablehlo.select %15, %16, %c_5 : tensor<i1>, tensor<i32>
      %18 = stablehlo.dynamic_slice %iterArg_8, %14, %17, sizes = [1, 32] : (tensor<1x32xf32>, tensor<i32>, tensor<i32>) -> tensor<1x32xf32>
      %19 = stablehlo.multiply %11, %11 : tensor<2x32xf32>
      %20 = stablehlo.reduce(%19 init: %cst_2) applies stablehlo.add across dimensions = [1] : (tensor<2x32xf32>, tensor<f32>) -> tensor<2xf32>
      %21 = stablehlo.broadcast_in_dim %20, dims = [0] : (tensor<2xf32>) -> tensor<2x1xf32>
      %22 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<2x1xf32>
      %23 = stablehlo.divide %21, %22 : tensor<2x1xf32>
      %24 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<2x1xf32>
      %25 = stablehlo.add %23, %24 : tensor<2x1xf32>
      %26 = stablehlo.sqrt %25 : tensor<2x1xf32>
      %27 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x1xf32>
      %28 = stablehlo.divide %27, %26 : tensor<2x1xf32>
      %29 = stablehlo.broadcast_in_dim %28, dims = [0, 1] : (tensor<2x1xf32>) -> tensor<2x32xf32>
      %30 = stablehlo.multiply %11, %29 : tensor<2x32xf32>
      %31 = stablehlo.broadcast_in_dim %18, dims = [0, 1] : (tensor<1x32xf32>) -> tensor<2x32xf32>
      %32 = stablehlo.multiply %30, %31 : tensor<2x32xf32>
      %33 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %34 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %35 = stablehlo.select %33, %34, %c_5 : tensor<i1>, tensor<i32>
      %36 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %37 = stablehlo.add %c_5, %c : tensor<i32>
      %38 = stablehlo.select %36, %37, %c_5 : tensor<i1>, tensor<i32>
      %39 = stablehlo.dynamic_update_slice %iterArg_7, %11, %35, %38 : (tensor<2x32xf32>, tensor<2x32xf32>, tensor<i32>, tensor<i32>) -> tensor<2x32xf32>
      %40 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %41 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %42 = stablehlo.select %40, %41, %c_5 : tensor<i1>, tensor<i32>
      %43 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %44 = stablehlo.add %c_5, %c : tensor<i32>
      %45 = stablehlo.select %43, %44, %c_5 : tensor<i1>, tensor<i32>
      %46 = stablehlo.dynamic_update_slice %iterArg_8, %18, %42, %45 : (tensor<1x32xf32>, tensor<1x32xf32>, tensor<i32>, tensor<i32>) -> tensor<1x32xf32>
      %47 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %48 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %49 = stablehlo.select %47, %48, %c_5 : tensor<i1>, tensor<i32>
      %50 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %51 = stablehlo.add %c_5, %c : tensor<i32>
      %52 = stablehlo.select %50, %51, %c_5 : tensor<i1>, tensor<i32>
      %53 = stablehlo.dynamic_update_slice %iterArg_9, %32, %49, %52 : (tensor<2x32xf32>, tensor<2x32xf32>, tensor<i32>, tensor<i32>) -> tensor<2x32xf32>
      %54 = stablehlo.add %iterArg, %c_4 : tensor<i32>
      stablehlo.return %54, %39, %46, %53 : tensor<i32>, tensor<2x32xf32>, tensor<1x32xf32>, tensor<2x32xf32>
    }
    %4 = stablehlo.reshape %3#3 : (tensor<2x32xf32>) -> tensor<1x64xf32>
    return %4 : tensor<1x64xf32>
  }
  func.func public @main_7x64_64(%arg0: tensor<7x64xf32>, %arg1: tensor<64xf32>) -> (tensor<7x64xf32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_0 = stablehlo.constant dense<9.99999997E-7> : tensor<f32>
    %cst_1 = stablehlo.constant dense<6.400000e+01> : tensor<f32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c = stablehlo.constant dense<64> : tensor<i32>
    %c_3 = stablehlo.constant dense<7> : tensor<i32>
    %c_4 = stablehlo.constant dense<1> : tensor<i32>
    %c_5 = stablehlo.constant dense<0> : tensor<i32>
    %cst_6 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
    %0 = stablehlo.reshape %arg1 : (tensor<64xf32>) -> tensor<1x64xf32>
    %1 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<7x64xf32>
    %2:4 = stablehlo.while(%iterArg = %c_5, %iterArg_7 = %arg0, %iterArg_8 = %0, %iterArg_9 = %1) : tensor<i32>, tensor<7x64xf32>, tensor<1x64xf32>, tensor<7x64xf32>
    cond {
      %3 = stablehlo.compare LT, %iterArg, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %3 : tensor<i1>
    } do {
      %3 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %4 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %5 = stablehlo.select %3, %4, %c_5 : tensor<i1>, tensor<i32>
      %6 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %7 = stablehlo.add %c_5, %c : tensor<i32>
      %8 = stablehlo.select %6, %7, %c_5 : tensor<i1>, tensor<i32>
      %9 = stablehlo.dynamic_slice %iterArg_7, %5, %8, sizes = [7, 64] : (tensor<7x64xf32>, tensor<i32>, tensor<i32>) -> tensor<7x64xf32>
      %10 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %11 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %12 = stablehlo.select %10, %11, %c_5 : tensor<i1>, tensor<i32>
      %13 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %14 = stablehlo.add %c_5, %c : tensor<i32>
      %15 = stablehlo.select %13, %14, %c_5 : tensor<i1>, tensor<i32>
      %16 = stablehlo.dynamic_slice %iterArg_8, %12, %15, sizes = [1, 64] : (tensor<1x64xf32>, tensor<i32>, tensor<i32>) -> tensor<1x64xf32>
      %17 = stablehlo.multiply %9, %9 : tensor<7x64xf32>
      %18 = stablehlo.reduce(%17 init: %cst_2) applies stablehlo.add across dimensions = [1] : (tensor<7x64xf32>, tensor<f32>) -> tensor<7xf32>
      %19 = stablehlo.broadcast_in_dim %18, dims = [0] : (tensor<7xf32>) -> tensor<7x1xf32>
      %20 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<7x1xf32>
      %21 = stablehlo.divide %19, %20 : tensor<7x1xf32>
      %22 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<7x1xf32>
      %23 = stablehlo.add %21, %22 : tensor<7x1xf32>
      %24 = stablehlo.sqrt %23 : tensor<7x1xf32>
      %25 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<7x1xf32>
      %26 = stablehlo.divide %25, %24 : tensor<7x1xf32>
      %27 = stablehlo.broadcast_in_dim %26, dims = [0, 1] : (tensor<7x1xf32>) -> tensor<7x64xf32>
      %28 = stablehlo.multiply %9, %27 : tensor<7x64xf32>
      %29 = stablehlo.broadcast_in_dim %16, dims = [0, 1] : (tensor<1x64xf32>) -> tensor<7x64xf32>
      %30 = stablehlo.multiply %28, %29 : tensor<7x64xf32>
      %31 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %32 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %33 = stablehlo.select %31, %32, %c_5 : tensor<i1>, tensor<i32>
      %34 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %35 = stablehlo.add %c_5, %c : tensor<i32>
      %36 = stablehlo.select %34, %35, %c_5 : tensor<i1>, tensor<i32>
      %37 = stablehlo.dynamic_update_slice %iterArg_7, %9, %33, %36 : (tensor<7x64xf32>, tensor<7x64xf32>, tensor<i32>, tensor<i32>) -> tensor<7x64xf32>
      %38 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %39 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %40 = stablehlo.select %38, %39, %c_5 : tensor<i1>, tensor<i32>
      %41 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %42 = stablehlo.add %c_5, %c : tensor<i32>
      %43 = stablehlo.select %41, %42, %c_5 : tensor<i1>, tensor<i32>
      %44 = stablehlo.dynamic_update_slice %iterArg_8, %16, %40, %43 : (tensor<1x64xf32>, tensor<1x64xf32>, tensor<i32>, tensor<i32>) -> tensor<1x64xf32>
      %45 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %46 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %47 = stablehlo.select %45, %46, %c_5 : tensor<i1>, tensor<i32>
      %48 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %49 = stablehlo.add %c_5, %c : tensor<i32>
      %50 = stablehlo.select %48, %49, %c_5 : tensor<i1>, tensor<i32>
      %51 = stablehlo.dynamic_update_slice %iterArg_9, %30, %47, %50 : (tensor<7x64xf32>, tensor<7x64xf32>, tensor<i32>, tensor<i32>) -> tensor<7x64xf32>
      %52 = stablehlo.add %iterArg, %c_4 : tensor<i32>
      stablehlo.return %52, %37, %44, %51 : tensor<i32>, tensor<7x64xf32>, tensor<1x64xf32>, tensor<7x64xf32>
    }
    return %2#3 : tensor<7x64xf32>
  }
  func.func public @main_7x128_32(%arg0: tensor<7x128xf32>, %arg1: tensor<32xf32>) -> (tensor<7x128xf32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_0 = stablehlo.constant dense<9.99999997E-7> : tensor<f32>
    %cst_1 = stablehlo.constant dense<3.200000e+01> : tensor<f32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c = stablehlo.constant dense<32> : tensor<i32>
    %c_3 = stablehlo.constant dense<28> : tensor<i32>
    %c_4 = stablehlo.constant dense<1> : tensor<i32>
    %c_5 = stablehlo.constant dense<0> : tensor<i32>
    %cst_6 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
    %0 = stablehlo.reshape %arg0 : (tensor<7x128xf32>) -> tensor<28x32xf32>
    %1 = stablehlo.reshape %arg1 : (tensor<32xf32>) -> tensor<1x32xf32>
    %2 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<28x32xf32>
    %3:4 = stablehlo.while(%iterArg = %c_5, %iterArg_7 = %0, %iterArg_8 = %1, %iterArg_9 = %2) : tensor<i32>, tensor<28x32xf32>, tensor<1x32xf32>, tensor<28x32xf32>
    cond {
      %5 = stablehlo.compare LT, %iterArg, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %5 : tensor<i1>
    } do {
      %5 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %6 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %7 = stablehlo.select %5, %6, %c_5 : tensor<i1>, tensor<i32>
      %8 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %9 = stablehlo.add %c_5, %c : tensor<i32>
      %10 = stablehlo.select %8, %9, %c_5 : tensor<i1>, tensor<i32>
      %11 = stablehlo.dynamic_slice %iterArg_7, %7, %10, sizes = [28, 32] : (tensor<28x32xf32>, tensor<i32>, tensor<i32>) -> tensor<28x32xf32>
      %12 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %13 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %14 = stablehlo.select %12, %13, %c_5 : tensor<i1>, tensor<i32>
      %15 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %16 = stablehlo.add %c_5, %c : tensor<i32>
      %17 = stablehlo.select %15, %16, %c_5 : tensor<i1>, tensor<i32>
      %18 = stablehlo.dynamic_slice %iterArg_8, %14, %17, sizes = [1, 32] : (tensor<1x32xf32>, tensor<i32>, tensor<i32>) -> tensor<1x32xf32>
      %19 = stablehlo.multiply %11, %11 : tensor<28x32xf32>
      %20 = stablehlo.reduce(%19 init: %cst_2) applies stablehlo.add across dimensions = [1] : (tensor<28x32xf32>, tensor<f32>) -> tensor<28xf32>
      %21 = stablehlo.broadcast_in_dim %20, dims = [0] : (tensor<28xf32>) -> tensor<28x1xf32>
      %22 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<28x1xf32>
      %23 = stablehlo.divide %21, %22 : tensor<28x1xf32>
      %24 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<28x1xf32>
      %25 = stablehlo.add %23, %24 : tensor<28x1xf32>
      %26 = stablehlo.sqrt %25 : tensor<28x1xf32>
      %27 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<28x1xf32>
      %28 = stablehlo.divide %27, %26 : tensor<28x1xf32>
      %29 = stablehlo.broadcast_in_dim %28, dims = [0, 1] : (tensor<28x1xf32>) -> tensor<28x32xf32>
      %30 = stablehlo.multiply %11, %29 : tensor<28x32xf32>
      %31 = stablehlo.broadcast_in_dim %18, dims = [0, 1] : (tensor<1x32xf32>) -> tensor<28x32xf32>
      %32 = stablehlo.multiply %30, %31 : tensor<28x32xf32>
      %33 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %34 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %35 = stablehlo.select %33, %34, %c_5 : tensor<i1>, tensor<i32>
      %36 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %37 = stablehlo.add %c_5, %c : tensor<i32>
      %38 = stablehlo.select %36, %37, %c_5 : tensor<i1>, tensor<i32>
      %39 = stablehlo.dynamic_update_slice %iterArg_7, %11, %35, %38 : (tensor<28x32xf32>, tensor<28x32xf32>, tensor<i32>, tensor<i32>) -> tensor<28x32xf32>
      %40 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %41 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %42 = stablehlo.select %40, %41, %c_5 : tensor<i1>, tensor<i32>
      %43 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %44 = stablehlo.add %c_5, %c : tensor<i32>
      %45 = stablehlo.select %43, %44, %c_5 : tensor<i1>, tensor<i32>
      %46 = stablehlo.dynamic_update_slice %iterArg_8, %18, %42, %45 : (tensor<1x32xf32>, tensor<1x32xf32>, tensor<i32>, tensor<i32>) -> tensor<1x32xf32>
      %47 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %48 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %49 = stablehlo.select %47, %48, %c_5 : tensor<i1>, tensor<i32>
      %50 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %51 = stablehlo.add %c_5, %c : tensor<i32>
      %52 = stablehlo.select %50, %51, %c_5 : tensor<i1>, tensor<i32>
      %53 = stablehlo.dynamic_update_slice %iterArg_9, %32, %49, %52 : (tensor<28x32xf32>, tensor<28x32xf32>, tensor<i32>, tensor<i32>) -> tensor<28x32xf32>
      %54 = stablehlo.add %iterArg, %c_4 : tensor<i32>
      stablehlo.return %54, %39, %46, %53 : tensor<i32>, tensor<28x32xf32>, tensor<1x32xf32>, tensor<28x32xf32>
    }
    %4 = stablehlo.reshape %3#3 : (tensor<28x32xf32>) -> tensor<7x128xf32>
    return %4 : tensor<7x128xf32>
  }
  func.func public @main_7x64_32(%arg0: tensor<7x64xf32>, %arg1: tensor<32xf32>) -> (tensor<7x64xf32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_0 = stablehlo.constant dense<9.99999997E-7> : tensor<f32>
    %cst_1 = stablehlo.constant dense<3.200000e+01> : tensor<f32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c = stablehlo.constant dense<32> : tensor<i32>
    %c_3 = stablehlo.constant dense<14> : tensor<i32>
    %c_4 = stablehlo.constant dense<1> : tensor<i32>
    %c_5 = stablehlo.constant dense<0> : tensor<i32>
    %cst_6 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
    %0 = stablehlo.reshape %arg0 : (tensor<7x64xf32>) -> tensor<14x32xf32>
    %1 = stablehlo.reshape %arg1 : (tensor<32xf32>) -> tensor<1x32xf32>
    %2 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<14x32xf32>
    %3:4 = stablehlo.while(%iterArg = %c_5, %iterArg_7 = %0, %iterArg_8 = %1, %iterArg_9 = %2) : tensor<i32>, tensor<14x32xf32>, tensor<1x32xf32>, tensor<14x32xf32>
    cond {
      %5 = stablehlo.compare LT, %iterArg, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %5 : tensor<i1>
    } do {
      %5 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %6 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %7 = stablehlo.select %5, %6, %c_5 : tensor<i1>, tensor<i32>
      %8 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %9 = stablehlo.add %c_5, %c : tensor<i32>
      %10 = stablehlo.select %8, %9, %c_5 : tensor<i1>, tensor<i32>
      %11 = stablehlo.dynamic_slice %iterArg_7, %7, %10, sizes = [14, 32] : (tensor<14x32xf32>, tensor<i32>, tensor<i32>) -> tensor<14x32xf32>
      %12 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %13 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %14 = stablehlo.select %12, %13, %c_5 : tensor<i1>, tensor<i32>
      %15 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %16 = stablehlo.add %c_5, %c : tensor<i32>
      %17 = stablehlo.select %15, %16, %c_5 : tensor<i1>, tensor<i32>
      %18 = stablehlo.dynamic_slice %iterArg_8, %14, %17, sizes = [1, 32] : (tensor<1x32xf32>, tensor<i32>, tensor<i32>) -> tensor<1x32xf32>
      %19 = stablehlo.multiply %11, %11 : tensor<14x32xf32>
      %20 = stablehlo.reduce(%19 init: %cst_2) applies stablehlo.add across dimensions = [1] : (tensor<14x32xf32>, tensor<f32>) -> tensor<14xf32>
      %21 = stablehlo.broadcast_in_dim %20, dims = [0] : (tensor<14xf32>) -> tensor<14x1xf32>
      %22 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<14x1xf32>
      %23 = stablehlo.divide %21, %22 : tensor<14x1xf32>
      %24 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<14x1xf32>
      %25 = stablehlo.add %23, %24 : tensor<14x1xf32>
      %26 = stablehlo.sqrt %25 : tensor<14x1xf32>
      %27 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<14x1xf32>
      %28 = stablehlo.divide %27, %26 : tensor<14x1xf32>
      %29 = stablehlo.broadcast_in_dim %28, dims = [0, 1] : (tensor<14x1xf32>) -> tensor<14x32xf32>
      %30 = stablehlo.multiply %11, %29 : tensor<14x32xf32>
      %31 = stablehlo.broadcast_in_dim %18, dims = [0, 1] : (tensor<1x32xf32>) -> tensor<14x32xf32>
      %32 = stablehlo.multiply %30, %31 : tensor<14x32xf32>
      %33 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %34 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %35 = stablehlo.select %33, %34, %c_5 : tensor<i1>, tensor<i32>
      %36 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %37 = stablehlo.add %c_5, %c : tensor<i32>
      %38 = stablehlo.select %36, %37, %c_5 : tensor<i1>, tensor<i32>
      %39 = stablehlo.dynamic_update_slice %iterArg_7, %11, %35, %38 : (tensor<14x32xf32>, tensor<14x32xf32>, tensor<i32>, tensor<i32>) -> tensor<14x32xf32>
      %40 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %41 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %42 = stablehlo.select %40, %41, %c_5 : tensor<i1>, tensor<i32>
      %43 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %44 = stablehlo.add %c_5, %c : tensor<i32>
      %45 = stablehlo.select %43, %44, %c_5 : tensor<i1>, tensor<i32>
      %46 = stablehlo.dynamic_update_slice %iterArg_8, %18, %42, %45 : (tensor<1x32xf32>, tensor<1x32xf32>, tensor<i32>, tensor<i32>) -> tensor<1x32xf32>
      %47 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %48 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %49 = stablehlo.select %47, %48, %c_5 : tensor<i1>, tensor<i32>
      %50 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %51 = stablehlo.add %c_5, %c : tensor<i32>
      %52 = stablehlo.select %50, %51, %c_5 : tensor<i1>, tensor<i32>
      %53 = stablehlo.dynamic_update_slice %iterArg_9, %32, %49, %52 : (tensor<14x32xf32>, tensor<14x32xf32>, tensor<i32>, tensor<i32>) -> tensor<14x32xf32>
      %54 = stablehlo.add %iterArg, %c_4 : tensor<i32>
      stablehlo.return %54, %39, %46, %53 : tensor<i32>, tensor<14x32xf32>, tensor<1x32xf32>, tensor<14x32xf32>
    }
    %4 = stablehlo.reshape %3#3 : (tensor<14x32xf32>) -> tensor<7x64xf32>
    return %4 : tensor<7x64xf32>
  }
  func.func public @main_16x64_64(%arg0: tensor<16x64xf32>, %arg1: tensor<64xf32>) -> (tensor<16x64xf32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_0 = stablehlo.constant dense<9.99999997E-7> : tensor<f32>
    %cst_1 = stablehlo.constant dense<6.400000e+01> : tensor<f32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c = stablehlo.constant dense<64> : tensor<i32>
    %c_3 = stablehlo.constant dense<16> : tensor<i32>
    %c_4 = stablehlo.constant dense<1> : tensor<i32>
    %c_5 = stablehlo.constant dense<0> : tensor<i32>
    %cst_6 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
    %0 = stablehlo.reshape %arg1 : (tensor<64xf32>) -> tensor<1x64xf32>
    %1 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<16x64xf32>
    %2:4 = stablehlo.while(%iterArg = %c_5, %iterArg_7 = %arg0, %iterArg_8 = %0, %iterArg_9 = %1) : tensor<i32>, tensor<16x64xf32>, tensor<1x64xf32>, tensor<16x64xf32>
    cond {
      %3 = stablehlo.compare LT, %iterArg, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %3 : tensor<i1>
    } do {
      %3 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %4 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %5 = stablehlo.select %3, %4, %c_5 : tensor<i1>, tensor<i32>
      %6 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %7 = stablehlo.add %c_5, %c : tensor<i32>
      %8 = stablehlo.select %6, %7, %c_5 : tensor<i1>, tensor<i32>
      %9 = stablehlo.dynamic_slice %iterArg_7, %5, %8, sizes = [16, 64] : (tensor<16x64xf32>, tensor<i32>, tensor<i32>) -> tensor<16x64xf32>
      %10 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %11 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %12 = stablehlo.select %10, %11, %c_5 : tensor<i1>, tensor<i32>
      %13 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %14 = stablehlo.add %c_5, %c : tensor<i32>
      %15 = stablehlo.select %13, %14, %c_5 : tensor<i1>, tensor<i32>
      %16 = stablehlo.dynamic_slice %iterArg_8, %12, %15, sizes = [1, 64] : (tensor<1x64xf32>, tensor<i32>, tensor<i32>) -> tensor<1x64xf32>
      %17 = stablehlo.multiply %9, %9 : tensor<16x64xf32>
      %18 = stablehlo.reduce(%17 init: %cst_2) applies stablehlo.add across dimensions = [1] : (tensor<16x64xf32>, tensor<f32>) -> tensor<16xf32>
      %19 = stablehlo.broadcast_in_dim %18, dims = [0] : (tensor<16xf32>) -> tensor<16x1xf32>
      %20 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<16x1xf32>
      %21 = stablehlo.divide %19, %20 : tensor<16x1xf32>
      %22 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<16x1xf32>
      %23 = stablehlo.add %21, %22 : tensor<16x1xf32>
      %24 = stablehlo.sqrt %23 : tensor<16x1xf32>
      %25 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<16x1xf32>
      %26 = stablehlo.divide %25, %24 : tensor<16x1xf32>
      %27 = stablehlo.broadcast_in_dim %26, dims = [0, 1] : (tensor<16x1xf32>) -> tensor<16x64xf32>
      %28 = stablehlo.multiply %9, %27 : tensor<16x64xf32>
      %29 = stablehlo.broadcast_in_dim %16, dims = [0, 1] : (tensor<1x64xf32>) -> tensor<16x64xf32>
      %30 = stablehlo.multiply %28, %29 : tensor<16x64xf32>
      %31 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %32 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %33 = stablehlo.select %31, %32, %c_5 : tensor<i1>, tensor<i32>
      %34 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %35 = stablehlo.add %c_5, %c : tensor<i32>
      %36 = stablehlo.select %34, %35, %c_5 : tensor<i1>, tensor<i32>
      %37 = stablehlo.dynamic_update_slice %iterArg_7, %9, %33, %36 : (tensor<16x64xf32>, tensor<16x64xf32>, tensor<i32>, tensor<i32>) -> tensor<16x64xf32>
      %38 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %39 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %40 = stablehlo.select %38, %39, %c_5 : tensor<i1>, tensor<i32>
      %41 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %42 = stablehlo.add %c_5, %c : tensor<i32>
      %43 = stablehlo.select %41, %42, %c_5 : tensor<i1>, tensor<i32>
      %44 = stablehlo.dynamic_update_slice %iterArg_8, %16, %40, %43 : (tensor<1x64xf32>, tensor<1x64xf32>, tensor<i32>, tensor<i32>) -> tensor<1x64xf32>
      %45 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %46 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %47 = stablehlo.select %45, %46, %c_5 : tensor<i1>, tensor<i32>
      %48 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %49 = stablehlo.add %c_5, %c : tensor<i32>
      %50 = stablehlo.select %48, %49, %c_5 : tensor<i1>, tensor<i32>
      %51 = stablehlo.dynamic_update_slice %iterArg_9, %30, %47, %50 : (tensor<16x64xf32>, tensor<16x64xf32>, tensor<i32>, tensor<i32>) -> tensor<16x64xf32>
      %52 = stablehlo.add %iterArg, %c_4 : tensor<i32>
      stablehlo.return %52, %37, %44, %51 : tensor<i32>, tensor<16x64xf32>, tensor<1x64xf32>, tensor<16x64xf32>
    }
    return %2#3 : tensor<16x64xf32>
  }
  func.func public @main_16x128_32(%arg0: tensor<16x128xf32>, %arg1: tensor<32xf32>) -> (tensor<16x128xf32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_0 = stablehlo.constant dense<9.99999997E-7> : tensor<f32>
    %cst_1 = stablehlo.constant dense<3.200000e+01> : tensor<f32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c = stablehlo.constant dense<32> : tensor<i32>
    %c_3 = stablehlo.constant dense<64> : tensor<i32>
    %c_4 = stablehlo.constant dense<1> : tensor<i32>
    %c_5 = stablehlo.constant dense<0> : tensor<i32>
    %cst_6 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
    %0 = stablehlo.reshape %arg0 : (tensor<16x128xf32>) -> tensor<64x32xf32>
    %1 = stablehlo.reshape %arg1 : (tensor<32xf32>) -> tensor<1x32xf32>
    %2 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<64x32xf32>
    %3:4 = stablehlo.while(%iterArg = %c_5, %iterArg_7 = %0, %iterArg_8 = %1, %iterArg_9 = %2) : tensor<i32>, tensor<64x32xf32>, tensor<1x32xf32>, tensor<64x32xf32>
    cond {
      %5 = stablehlo.compare LT, %iterArg, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %5 : tensor<i1>
    } do {
      %5 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %6 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %7 = stablehlo.select %5, %6, %c_5 : tensor<i1>, tensor<i32>
      %8 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %9 = stablehlo.add %c_5, %c : tensor<i32>
      %10 = stablehlo.select %8, %9, %c_5 : tensor<i1>, tensor<i32>
      %11 = stablehlo.dynamic_slice %iterArg_7, %7, %10, sizes = [64, 32] : (tensor<64x32xf32>, tensor<i32>, tensor<i32>) -> tensor<64x32xf32>
      %12 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %13 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %14 = stablehlo.select %12, %13, %c_5 : tensor<i1>, tensor<i32>
      %15 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %16 = stablehlo.add %c_5, %c : tensor<i32>
      %17 = stablehlo.select %15, %16, %c_5 : tensor<i1>, tensor<i32>
      %18 = stablehlo.dynamic_slice %iterArg_8, %14, %17, sizes = [1, 32] : (tensor<1x32xf32>, tensor<i32>, tensor<i32>) -> tensor<1x32xf32>
      %19 = stablehlo.multiply %11, %11 : tensor<64x32xf32>
      %20 = stablehlo.reduce(%19 init: %cst_2) applies stablehlo.add across dimensions = [1] : (tensor<64x32xf32>, tensor<f32>) -> tensor<64xf32>
      %21 = stablehlo.broadcast_in_dim %20, dims = [0] : (tensor<64xf32>) -> tensor<64x1xf32>
      %22 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<64x1xf32>
      %23 = stablehlo.divide %21, %22 : tensor<64x1xf32>
      %24 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<64x1xf32>
      %25 = stablehlo.add %23, %24 : tensor<64x1xf32>
      %26 = stablehlo.sqrt %25 : tensor<64x1xf32>
      %27 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<64x1xf32>
      %28 = stablehlo.divide %27, %26 : tensor<64x1xf32>
      %29 = stablehlo.broadcast_in_dim %28, dims = [0, 1] : (tensor<64x1xf32>) -> tensor<64x32xf32>
      %30 = stablehlo.multiply %11, %29 : tensor<64x32xf32>
      %31 = stablehlo.broadcast_in_dim %18, dims = [0, 1] : (tensor<1x32xf32>) -> tensor<64x32xf32>
      %32 = stablehlo.multiply %30, %31 : tensor<64x32xf32>
      %33 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %34 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %35 = stablehlo.select %33, %34, %c_5 : tensor<i1>, tensor<i32>
      %36 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %37 = stablehlo.add %c_5, %c : tensor<i32>
      %38 = stablehlo.select %36, %37, %c_5 : tensor<i1>, tensor<i32>
      %39 = stablehlo.dynamic_update_slice %iterArg_7, %11, %35, %38 : (tensor<64x32xf32>, tensor<64x32xf32>, tensor<i32>, tensor<i32>) -> tensor<64x32xf32>
      %40 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %41 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %42 = stablehlo.select %40, %41, %c_5 : tensor<i1>, tensor<i32>
      %43 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %44 = stablehlo.add %c_5, %c : tensor<i32>
      %45 = stablehlo.select %43, %44, %c_5 : tensor<i1>, tensor<i32>
      %46 = stablehlo.dynamic_update_slice %iterArg_8, %18, %42, %45 : (tensor<1x32xf32>, tensor<1x32xf32>, tensor<i32>, tensor<i32>) -> tensor<1x32xf32>
      %47 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %48 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %49 = stablehlo.select %47, %48, %c_5 : tensor<i1>, tensor<i32>
      %50 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %51 = stablehlo.add %c_5, %c : tensor<i32>
      %52 = stablehlo.select %50, %51, %c_5 : tensor<i1>, tensor<i32>
      %53 = stablehlo.dynamic_update_slice %iterArg_9, %32, %49, %52 : (tensor<64x32xf32>, tensor<64x32xf32>, tensor<i32>, tensor<i32>) -> tensor<64x32xf32>
      %54 = stablehlo.add %iterArg, %c_4 : tensor<i32>
      stablehlo.return %54, %39, %46, %53 : tensor<i32>, tensor<64x32xf32>, tensor<1x32xf32>, tensor<64x32xf32>
    }
    %4 = stablehlo.reshape %3#3 : (tensor<64x32xf32>) -> tensor<16x128xf32>
    return %4 : tensor<16x128xf32>
  }
  func.func public @main_16x64_32(%arg0: tensor<16x64xf32>, %arg1: tensor<32xf32>) -> (tensor<16x64xf32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_0 = stablehlo.constant dense<9.99999997E-7> : tensor<f32>
    %cst_1 = stablehlo.constant dense<3.200000e+01> : tensor<f32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c = stablehlo.constant dense<32> : tensor<i32>
    %c_3 = stablehlo.constant dense<1> : tensor<i32>
    %c_4 = stablehlo.constant dense<0> : tensor<i32>
    %cst_5 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
    %0 = stablehlo.reshape %arg0 : (tensor<16x64xf32>) -> tensor<32x32xf32>
    %1 = stablehlo.reshape %arg1 : (tensor<32xf32>) -> tensor<1x32xf32>
    %2 = stablehlo.broadcast_in_dim %cst_5, dims = [] : (tensor<f32>) -> tensor<32x32xf32>
    %3:4 = stablehlo.while(%iterArg = %c_4, %iterArg_6 = %0, %iterArg_7 = %1, %iterArg_8 = %2) : tensor<i32>, tensor<32x32xf32>, tensor<1x32xf32>, tensor<32x32xf32>
    cond {
      %5 = stablehlo.compare LT, %iterArg, %c_3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %5 : tensor<i1>
    } do {
      %5 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %6 = stablehlo.add %c_4, %c : tensor<i32>
      %7 = stablehlo.select %5, %6, %c_4 : tensor<i1>, tensor<i32>
      %8 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %9 = stablehlo.add %c_4, %c : tensor<i32>
      %10 = stablehlo.select %8, %9, %c_4 : tensor<i1>, tensor<i32>
      %11 = stablehlo.dynamic_slice %iterArg_6, %7, %10, sizes = [32, 32] : (tensor<32x32xf32>, tensor<i32>, tensor<i32>) -> tensor<32x32xf32>
      %12 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %13 = stablehlo.add %c_4, %c_3 : tensor<i32>
      %14 = stablehlo.select %12, %13, %c_4 : tensor<i1>, tensor<i32>
      %15 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %16 = stablehlo.add %c_4, %c : tensor<i32>
      %17 = stablehlo.select %15, %16, %c_4 : tensor<i1>, tensor<i32>
      %18 = stablehlo.dynamic_slice %iterArg_7, %14, %17, sizes = [1, 32] : (tensor<1x32xf32>, tensor<i32>, tensor<i32>) -> tensor<1x32xf32>
      %19 = stablehlo.multiply %11, %11 : tensor<32x32xf32>
      %20 = stablehlo.reduce(%19 init: %cst_2) applies stablehlo.add across dimensions = [1] : (tensor<32x32xf32>, tensor<f32>) -> tensor<32xf32>
      %21 = stablehlo.broadcast_in_dim %20, dims = [0] : (tensor<32xf32>) -> tensor<32x1xf32>
      %22 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<32x1xf32>
      %23 = stablehlo.divide %21, %22 : tensor<32x1xf32>
      %24 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<32x1xf32>
      %25 = stablehlo.add %23, %24 : tensor<32x1xf32>
      %26 = stablehlo.sqrt %25 : tensor<32x1xf32>
      %27 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<32x1xf32>
      %28 = stablehlo.divide %27, %26 : tensor<32x1xf32>
      %29 = stablehlo.broadcast_in_dim %28, dims = [0, 1] : (tensor<32x1xf32>) -> tensor<32x32xf32>
      %30 = stablehlo.multiply %11, %29 : tensor<32x32xf32>
      %31 = stablehlo.broadcast_in_dim %18, dims = [0, 1] : (tensor<1x32xf32>) -> tensor<32x32xf32>
      %32 = stablehlo.multiply %30, %31 : tensor<32x32xf32>
      %33 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %34 = stablehlo.add %c_4, %c : tensor<i32>
      %35 = stablehlo.select %33, %34, %c_4 : tensor<i1>, tensor<i32>
      %36 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %37 = stablehlo.add %c_4, %c : tensor<i32>
      %38 = stablehlo.select %36, %37, %c_4 : tensor<i1>, tensor<i32>
      %39 = stablehlo.dynamic_update_slice %iterArg_6, %11, %35, %38 : (tensor<32x32xf32>, tensor<32x32xf32>, tensor<i32>, tensor<i32>) -> tensor<32x32xf32>
      %40 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %41 = stablehlo.add %c_4, %c_3 : tensor<i32>
      %42 = stablehlo.select %40, %41, %c_4 : tensor<i1>, tensor<i32>
      %43 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %44 = stablehlo.add %c_4, %c : tensor<i32>
      %45 = stablehlo.select %43, %44, %c_4 : tensor<i1>, tensor<i32>
      %46 = stablehlo.dynamic_update_slice %iterArg_7, %18, %42, %45 : (tensor<1x32xf32>, tensor<1x32xf32>, tensor<i32>, tensor<i32>) -> tensor<1x32xf32>
      %47 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %48 = stablehlo.add %c_4, %c : tensor<i32>
      %49 = stablehlo.select %47, %48, %c_4 : tensor<i1>, tensor<i32>
      %50 = stablehlo.compare LT, %c_4, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %51 = stablehlo.add %c_4, %c : tensor<i32>
      %52 = stablehlo.select %50, %51, %c_4 : tensor<i1>, tensor<i32>
      %53 = stablehlo.dynamic_update_slice %iterArg_8, %32, %49, %52 : (tensor<32x32xf32>, tensor<32x32xf32>, tensor<i32>, tensor<i32>) -> tensor<32x32xf32>
      %54 = stablehlo.add %iterArg, %c_3 : tensor<i32>
      stablehlo.return %54, %39, %46, %53 : tensor<i32>, tensor<32x32xf32>, tensor<1x32xf32>, tensor<32x32xf32>
    }
    %4 = stablehlo.reshape %3#3 : (tensor<32x32xf32>) -> tensor<16x64xf32>
    return %4 : tensor<16x64xf32>
  }
  func.func public @main_19x64_64(%arg0: tensor<19x64xf32>, %arg1: tensor<64xf32>) -> (tensor<19x64xf32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_0 = stablehlo.constant dense<9.99999997E-7> : tensor<f32>
    %cst_1 = stablehlo.constant dense<6.400000e+01> : tensor<f32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c = stablehlo.constant dense<64> : tensor<i32>
    %c_3 = stablehlo.constant dense<19> : tensor<i32>
    %c_4 = stablehlo.constant dense<1> : tensor<i32>
    %c_5 = stablehlo.constant dense<0> : tensor<i32>
    %cst_6 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
    %0 = stablehlo.reshape %arg1 : (tensor<64xf32>) -> tensor<1x64xf32>
    %1 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<19x64xf32>
    %2:4 = stablehlo.while(%iterArg = %c_5, %iterArg_7 = %arg0, %iterArg_8 = %0, %iterArg_9 = %1) : tensor<i32>, tensor<19x64xf32>, tensor<1x64xf32>, tensor<19x64xf32>
    cond {
      %3 = stablehlo.compare LT, %iterArg, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %3 : tensor<i1>
    } do {
      %3 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %4 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %5 = stablehlo.select %3, %4, %c_5 : tensor<i1>, tensor<i32>
      %6 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %7 = stablehlo.add %c_5, %c : tensor<i32>
      %8 = stablehlo.select %6, %7, %c_5 : tensor<i1>, tensor<i32>
      %9 = stablehlo.dynamic_slice %iterArg_7, %5, %8, sizes = [19, 64] : (tensor<19x64xf32>, tensor<i32>, tensor<i32>) -> tensor<19x64xf32>
      %10 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %11 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %12 = stablehlo.select %10, %11, %c_5 : tensor<i1>, tensor<i32>
      %13 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %14 = stablehlo.add %c_5, %c : tensor<i32>
      %15 = stablehlo.select %13, %14, %c_5 : tensor<i1>, tensor<i32>
      %16 = stablehlo.dynamic_slice %iterArg_8, %12, %15, sizes = [1, 64] : (tensor<1x64xf32>, tensor<i32>, tensor<i32>) -> tensor<1x64xf32>
      %17 = stablehlo.multiply %9, %9 : tensor<19x64xf32>
      %18 = stablehlo.reduce(%17 init: %cst_2) applies stablehlo.add across dimensions = [1] : (tensor<19x64xf32>, tensor<f32>) -> tensor<19xf32>
      %19 = stablehlo.broadcast_in_dim %18, dims = [0] : (tensor<19xf32>) -> tensor<19x1xf32>
      %20 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<19x1xf32>
      %21 = stablehlo.divide %19, %20 : tensor<19x1xf32>
      %22 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<19x1xf32>
      %23 = stablehlo.add %21, %22 : tensor<19x1xf32>
      %24 = stablehlo.sqrt %23 : tensor<19x1xf32>
      %25 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<19x1xf32>
      %26 = stablehlo.divide %25, %24 : tensor<19x1xf32>
      %27 = stablehlo.broadcast_in_dim %26, dims = [0, 1] : (tensor<19x1xf32>) -> tensor<19x64xf32>
      %28 = stablehlo.multiply %9, %27 : tensor<19x64xf32>
      %29 = stablehlo.broadcast_in_dim %16, dims = [0, 1] : (tensor<1x64xf32>) -> tensor<19x64xf32>
      %30 = stablehlo.multiply %28, %29 : tensor<19x64xf32>
      %31 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %32 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %33 = stablehlo.select %31, %32, %c_5 : tensor<i1>, tensor<i32>
      %34 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %35 = stablehlo.add %c_5, %c : tensor<i32>
      %36 = stablehlo.select %34, %35, %c_5 : tensor<i1>, tensor<i32>
      %37 = stablehlo.dynamic_update_slice %iterArg_7, %9, %33, %36 : (tensor<19x64xf32>, tensor<19x64xf32>, tensor<i32>, tensor<i32>) -> tensor<19x64xf32>
      %38 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %39 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %40 = stablehlo.select %38, %39, %c_5 : tensor<i1>, tensor<i32>
      %41 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %42 = stablehlo.add %c_5, %c : tensor<i32>
      %43 = stablehlo.select %41, %42, %c_5 : tensor<i1>, tensor<i32>
      %44 = stablehlo.dynamic_update_slice %iterArg_8, %16, %40, %43 : (tensor<1x64xf32>, tensor<1x64xf32>, tensor<i32>, tensor<i32>) -> tensor<1x64xf32>
      %45 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %46 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %47 = stablehlo.select %45, %46, %c_5 : tensor<i1>, tensor<i32>
      %48 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %49 = stablehlo.add %c_5, %c : tensor<i32>
      %50 = stablehlo.select %48, %49, %c_5 : tensor<i1>, tensor<i32>
      %51 = stablehlo.dynamic_update_slice %iterArg_9, %30, %47, %50 : (tensor<19x64xf32>, tensor<19x64xf32>, tensor<i32>, tensor<i32>) -> tensor<19x64xf32>
      %52 = stablehlo.add %iterArg, %c_4 : tensor<i32>
      stablehlo.return %52, %37, %44, %51 : tensor<i32>, tensor<19x64xf32>, tensor<1x64xf32>, tensor<19x64xf32>
    }
    return %2#3 : tensor<19x64xf32>
  }
  func.func public @main_19x128_32(%arg0: tensor<19x128xf32>, %arg1: tensor<32xf32>) -> (tensor<19x128xf32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_0 = stablehlo.constant dense<9.99999997E-7> : tensor<f32>
    %cst_1 = stablehlo.constant dense<3.200000e+01> : tensor<f32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c = stablehlo.constant dense<32> : tensor<i32>
    %c_3 = stablehlo.constant dense<76> : tensor<i32>
    %c_4 = stablehlo.constant dense<1> : tensor<i32>
    %c_5 = stablehlo.constant dense<0> : tensor<i32>
    %cst_6 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
    %0 = stablehlo.reshape %arg0 : (tensor<19x128xf32>) -> tensor<76x32xf32>
    %1 = stablehlo.reshape %arg1 : (tensor<32xf32>) -> tensor<1x32xf32>
    %2 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<76x32xf32>
    %3:4 = stablehlo.while(%iterArg = %c_5, %iterArg_7 = %0, %iterArg_8 = %1, %iterArg_9 = %2) : tensor<i32>, tensor<76x32xf32>, tensor<1x32xf32>, tensor<76x32xf32>
    cond {
      %5 = stablehlo.compare LT, %iterArg, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %5 : tensor<i1>
    } do {
      %5 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %6 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %7 = stablehlo.select %5, %6, %c_5 : tensor<i1>, tensor<i32>
      %8 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %9 = stablehlo.add %c_5, %c : tensor<i32>
      %10 = stablehlo.select %8, %9, %c_5 : tensor<i1>, tensor<i32>
      %11 = stablehlo.dynamic_slice %iterArg_7, %7, %10, sizes = [76, 32] : (tensor<76x32xf32>, tensor<i32>, tensor<i32>) -> tensor<76x32xf32>
      %12 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %13 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %14 = stablehlo.select %12, %13, %c_5 : tensor<i1>, tensor<i32>
      %15 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %16 = stablehlo.add %c_5, %c : tensor<i32>
      %17 = stablehlo.select %15, %16, %c_5 : tensor<i1>, tensor<i32>
      %18 = stablehlo.dynamic_slice %iterArg_8, %14, %17, sizes = [1, 32] : (tensor<1x32xf32>, tensor<i32>, tensor<i32>) -> tensor<1x32xf32>
      %19 = stablehlo.multiply %11, %11 : tensor<76x32xf32>
      %20 = stablehlo.reduce(%19 init: %cst_2) applies stablehlo.add across dimensions = [1] : (tensor<76x32xf32>, tensor<f32>) -> tensor<76xf32>
      %21 = stablehlo.broadcast_in_dim %20, dims = [0] : (tensor<76xf32>) -> tensor<76x1xf32>
      %22 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<76x1xf32>
      %23 = stablehlo.divide %21, %22 : tensor<76x1xf32>
      %24 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<76x1xf32>
      %25 = stablehlo.add %23, %24 : tensor<76x1xf32>
      %26 = stablehlo.sqrt %25 : tensor<76x1xf32>
      %27 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<76x1xf32>
      %28 = stablehlo.divide %27, %26 : tensor<76x1xf32>
      %29 = stablehlo.broadcast_in_dim %28, dims = [0, 1] : (tensor<76x1xf32>) -> tensor<76x32xf32>
      %30 = stablehlo.multiply %11, %29 : tensor<76x32xf32>
      %31 = stablehlo.broadcast_in_dim %18, dims = [0, 1] : (tensor<1x32xf32>) -> tensor<76x32xf32>
      %32 = stablehlo.multiply %30, %31 : tensor<76x32xf32>
      %33 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %34 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %35 = stablehlo.select %33, %34, %c_5 : tensor<i1>, tensor<i32>
      %36 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %37 = stablehlo.add %c_5, %c : tensor<i32>
      %38 = stablehlo.select %36, %37, %c_5 : tensor<i1>, tensor<i32>
      %39 = stablehlo.dynamic_update_slice %iterArg_7, %11, %35, %38 : (tensor<76x32xf32>, tensor<76x32xf32>, tensor<i32>, tensor<i32>) -> tensor<76x32xf32>
      %40 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %41 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %42 = stablehlo.select %40, %41, %c_5 : tensor<i1>, tensor<i32>
      %43 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %44 = stablehlo.add %c_5, %c : tensor<i32>
      %45 = stablehlo.select %43, %44, %c_5 : tensor<i1>, tensor<i32>
      %46 = stablehlo.dynamic_update_slice %iterArg_8, %18, %42, %45 : (tensor<1x32xf32>, tensor<1x32xf32>, tensor<i32>, tensor<i32>) -> tensor<1x32xf32>
      %47 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %48 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %49 = stablehlo.select %47, %48, %c_5 : tensor<i1>, tensor<i32>
      %50 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %51 = stablehlo.add %c_5, %c : tensor<i32>
      %52 = stablehlo.select %50, %51, %c_5 : tensor<i1>, tensor<i32>
      %53 = stablehlo.dynamic_update_slice %iterArg_9, %32, %49, %52 : (tensor<76x32xf32>, tensor<76x32xf32>, tensor<i32>, tensor<i32>) -> tensor<76x32xf32>
      %54 = stablehlo.add %iterArg, %c_4 : tensor<i32>
      stablehlo.return %54, %39, %46, %53 : tensor<i32>, tensor<76x32xf32>, tensor<1x32xf32>, tensor<76x32xf32>
    }
    %4 = stablehlo.reshape %3#3 : (tensor<76x32xf32>) -> tensor<19x128xf32>
    return %4 : tensor<19x128xf32>
  }
  func.func public @main_19x64_32(%arg0: tensor<19x64xf32>, %arg1: tensor<32xf32>) -> (tensor<19x64xf32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_0 = stablehlo.constant dense<9.99999997E-7> : tensor<f32>
    %cst_1 = stablehlo.constant dense<3.200000e+01> : tensor<f32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c = stablehlo.constant dense<32> : tensor<i32>
    %c_3 = stablehlo.constant dense<38> : tensor<i32>
    %c_4 = stablehlo.constant dense<1> : tensor<i32>
    %c_5 = stablehlo.constant dense<0> : tensor<i32>
    %cst_6 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
    %0 = stablehlo.reshape %arg0 : (tensor<19x64xf32>) -> tensor<38x32xf32>
    %1 = stablehlo.reshape %arg1 : (tensor<32xf32>) -> tensor<1x32xf32>
    %2 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<38x32xf32>
    %3:4 = stablehlo.while(%iterArg = %c_5, %iterArg_7 = %0, %iterArg_8 = %1, %iterArg_9 = %2) : tensor<i32>, tensor<38x32xf32>, tensor<1x32xf32>, tensor<38x32xf32>
    cond {
      %5 = stablehlo.compare LT, %iterArg, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %5 : tensor<i1>
    } do {
      %5 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %6 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %7 = stablehlo.select %5, %6, %c_5 : tensor<i1>, tensor<i32>
      %8 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %9 = stablehlo.add %c_5, %c : tensor<i32>
      %10 = stablehlo.select %8, %9, %c_5 : tensor<i1>, tensor<i32>
      %11 = stablehlo.dynamic_slice %iterArg_7, %7, %10, sizes = [38, 32] : (tensor<38x32xf32>, tensor<i32>, tensor<i32>) -> tensor<38x32xf32>
      %12 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %13 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %14 = stablehlo.select %12, %13, %c_5 : tensor<i1>, tensor<i32>
      %15 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %16 = stablehlo.add %c_5, %c : tensor<i32>
      %17 = stablehlo.select %15, %16, %c_5 : tensor<i1>, tensor<i32>
      %18 = stablehlo.dynamic_slice %iterArg_8, %14, %17, sizes = [1, 32] : (tensor<1x32xf32>, tensor<i32>, tensor<i32>) -> tensor<1x32xf32>
      %19 = stablehlo.multiply %11, %11 : tensor<38x32xf32>
      %20 = stablehlo.reduce(%19 init: %cst_2) applies stablehlo.add across dimensions = [1] : (tensor<38x32xf32>, tensor<f32>) -> tensor<38xf32>
      %21 = stablehlo.broadcast_in_dim %20, dims = [0] : (tensor<38xf32>) -> tensor<38x1xf32>
      %22 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<38x1xf32>
      %23 = stablehlo.divide %21, %22 : tensor<38x1xf32>
      %24 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<38x1xf32>
      %25 = stablehlo.add %23, %24 : tensor<38x1xf32>
      %26 = stablehlo.sqrt %25 : tensor<38x1xf32>
      %27 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<38x1xf32>
      %28 = stablehlo.divide %27, %26 : tensor<38x1xf32>
      %29 = stablehlo.broadcast_in_dim %28, dims = [0, 1] : (tensor<38x1xf32>) -> tensor<38x32xf32>
      %30 = stablehlo.multiply %11, %29 : tensor<38x32xf32>
      %31 = stablehlo.broadcast_in_dim %18, dims = [0, 1] : (tensor<1x32xf32>) -> tensor<38x32xf32>
      %32 = stablehlo.multiply %30, %31 : tensor<38x32xf32>
      %33 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %34 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %35 = stablehlo.select %33, %34, %c_5 : tensor<i1>, tensor<i32>
      %36 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %37 = stablehlo.add %c_5, %c : tensor<i32>
      %38 = stablehlo.select %36, %37, %c_5 : tensor<i1>, tensor<i32>
      %39 = stablehlo.dynamic_update_slice %iterArg_7, %11, %35, %38 : (tensor<38x32xf32>, tensor<38x32xf32>, tensor<i32>, tensor<i32>) -> tensor<38x32xf32>
      %40 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %41 = stablehlo.add %c_5, %c_4 : tensor<i32>
      %42 = stablehlo.select %40, %41, %c_5 : tensor<i1>, tensor<i32>
      %43 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %44 = stablehlo.add %c_5, %c : tensor<i32>
      %45 = stablehlo.select %43, %44, %c_5 : tensor<i1>, tensor<i32>
      %46 = stablehlo.dynamic_update_slice %iterArg_8, %18, %42, %45 : (tensor<1x32xf32>, tensor<1x32xf32>, tensor<i32>, tensor<i32>) -> tensor<1x32xf32>
      %47 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %48 = stablehlo.add %c_5, %c_3 : tensor<i32>
      %49 = stablehlo.select %47, %48, %c_5 : tensor<i1>, tensor<i32>
      %50 = stablehlo.compare LT, %c_5, %c_5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %51 = stablehlo.add %c_5, %c : tensor<i32>
      %52 = stablehlo.select %50, %51, %c_5 : tensor<i1>, tensor<i32>
      %53 = stablehlo.dynamic_update_slice %iterArg_9, %32, %49, %52 : (tensor<38x32xf32>, tensor<38x32xf32>, tensor<i32>, tensor<i32>) -> tensor<38x32xf32>
      %54 = stablehlo.add %iterArg, %c_4 : tensor<i32>
      stablehlo.return %54, %39, %46, %53 : tensor<i32>, tensor<38x32xf32>, tensor<1x32xf32>, tensor<38x32xf32>
    }
    %4 = stablehlo.reshape %3#3 : (tensor<38x32xf32>) -> tensor<19x64xf32>
    return %4 : tensor<19x64xf32>
  }
}
