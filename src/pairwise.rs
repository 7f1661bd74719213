//! Sums in a fixed order on any backend, for the stock-op bodies and the cross-entropy options.
//!
//! A stock `sum` or `sum_dim` leaves the order of its additions to the backend: Burn 0.21 on
//! CubeCL autotunes between a chained reduction and cubek's `shared_sum` (atomic adds), which
//! one runs depending on timing, so the same call can give other bits; on the CPU backends the
//! order is a loop over the elements, whose rounding error grows with their number. [`sum_dim`]
//! here is built from element-wise additions alone: element k of the first half plus element k
//! of the second half, level after level, until one is left (an odd length carries its last
//! element to the next level). An addition of two numbers has one result on every backend, so
//! the bits are a function of the values alone, and the rounding error of n terms grows as
//! `ceil(log2 n)` rather than n. [`sum`] is also `FusedHeadBackend::head_sum`'s default; the
//! CubeCL backends run the same order in one kernel (`kernels::reductions::pairwise`), where
//! these stock ops take one or two launches per level.

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

/// The sum of `t` along `dim`, which keeps its size 1, in the fixed pairwise order of this
/// module: `ceil(log2 n)` levels of element-wise additions for n elements along `dim`. The sum
/// of no element is 0 (an empty tensor where another dim is 0, made without a kernel).
pub(crate) fn sum_dim<B: Backend, const D: usize>(t: Tensor<B, D>, dim: usize) -> Tensor<B, D> {
    let mut n = t.dims()[dim];
    if n == 0 {
        let mut dims = t.dims();
        dims[dim] = 1;
        let (device, dtype) = (t.device(), t.dtype());
        return if dims.iter().product::<usize>() == 0 {
            Tensor::empty(dims, (&device, dtype))
        } else {
            Tensor::zeros(dims, (&device, dtype))
        };
    }
    let mut t = t;
    while n > 1 {
        let half = n / 2;
        // k + (k + half) for k < half; an odd n's last element waits for the next level.
        let pairs = t.clone().narrow(dim, 0, half) + t.clone().narrow(dim, half, half);
        t = if n % 2 == 1 {
            Tensor::cat(vec![pairs, t.narrow(dim, 2 * half, 1)], dim)
        } else {
            pairs
        };
        n = half + n % 2;
    }
    t
}

/// The sum of every element of `t` `[n]`, `[1]`, in [`sum_dim`]'s order.
pub(crate) fn sum<B: Backend>(t: Tensor<B, 1>) -> Tensor<B, 1> {
    sum_dim(t, 0)
}

#[cfg(test)]
mod tests {
    use burn::backend::NdArray;
    use burn::tensor::{DType, Tensor, TensorData};

    /// The order of [`super::sum_dim`], written out on the host.
    fn host(mut v: Vec<f32>) -> f32 {
        if v.is_empty() {
            return 0.0;
        }
        while v.len() > 1 {
            let half = v.len() / 2;
            let mut next: Vec<f32> = (0..half).map(|k| v[k] + v[k + half]).collect();
            if v.len() % 2 == 1 {
                next.push(v[2 * half]);
            }
            v = next;
        }
        v[0]
    }

    #[test]
    fn the_order_is_the_pairwise_tree_for_every_length() {
        let device = Default::default();
        for n in [0usize, 1, 2, 3, 5, 8, 13, 64, 65, 1000, 65601] {
            // Values whose sum depends on the order: magnitudes from 1e-4 to 1e4.
            let v: Vec<f32> = (0..n)
                .map(|k| ((k * 7919 % 997) as f32 - 498.0) * 10f32.powi((k % 9) as i32 - 4))
                .collect();
            let t = Tensor::<NdArray<f32>, 1>::from_data(
                TensorData::new(v.clone(), [n]),
                (&device, DType::F32),
            );
            let got = super::sum(t).into_data().to_vec::<f32>().unwrap();
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].to_bits(), host(v).to_bits(), "n = {n}");
        }
    }

    #[test]
    fn rows_and_columns_of_a_matrix() {
        let device = Default::default();
        let (rows, cols) = (7, 13);
        let v: Vec<f32> = (0..rows * cols).map(|k| (k as f32).sin() * 1e3).collect();
        let t = Tensor::<NdArray<f32>, 2>::from_data(
            TensorData::new(v.clone(), [rows, cols]),
            (&device, DType::F32),
        );
        let by_row = super::sum_dim(t.clone(), 1)
            .into_data()
            .to_vec::<f32>()
            .unwrap();
        let by_col = super::sum_dim(t, 0).into_data().to_vec::<f32>().unwrap();
        for r in 0..rows {
            let want = host(v[r * cols..(r + 1) * cols].to_vec());
            assert_eq!(by_row[r].to_bits(), want.to_bits(), "row {r}");
        }
        for c in 0..cols {
            let want = host((0..rows).map(|r| v[r * cols + c]).collect());
            assert_eq!(by_col[c].to_bits(), want.to_bits(), "column {c}");
        }
    }
}
