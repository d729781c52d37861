//! Where trine's row-major operands go in cuBLAS's column-major calls (the module above
//! explains the transposition), and cuBLAS's limits on dimensions.

use super::library::{OP_N, OP_T};
use crate::error::BackendError;
use std::ffi::c_int;

/// One column-major cuBLAS GEMM, `C' = op(A')·op(B')` with `C'` of `m×n`: the arguments that
/// compute a row-major product of trine's matrices (see the notes of `cublas`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnMajor {
    pub trans_a: c_int,
    pub trans_b: c_int,
    pub m: c_int,
    pub n: c_int,
    pub k: c_int,
    pub lda: c_int,
    pub ldb: c_int,
    pub ldc: c_int,
}

/// cuBLAS's A' is trine's B and its B' is trine's A.
pub fn gemm_layout(m: c_int, n: c_int, k: c_int, b_transposed: bool) -> ColumnMajor {
    ColumnMajor {
        trans_a: if b_transposed { OP_T } else { OP_N },
        trans_b: OP_N,
        m: n,
        n: m,
        k,
        lda: if b_transposed { k } else { n },
        ldb: k,
        ldc: n,
    }
}

/// `y = W·x` as a GEMM with one column: `W` row-major `rows×cols` reads column-major as
/// `Wᵀ` (`cols×rows`, leading dimension `cols`), so A' is W transposed back; B' is x.
pub fn gemv_layout(rows: c_int, cols: c_int) -> ColumnMajor {
    ColumnMajor {
        trans_a: OP_T,
        trans_b: OP_N,
        m: rows,
        n: 1,
        k: cols,
        lda: cols,
        ldb: cols,
        ldc: rows,
    }
}

/// A dimension as cuBLAS's `int`: 1 to `i32::MAX`.
pub fn dim(name: &str, v: u32) -> Result<c_int, BackendError> {
    match c_int::try_from(v) {
        Ok(d) if d > 0 => Ok(d),
        _ => Err(BackendError::BadDispatch(format!(
            "cuBLAS: {name} = {v} is outside 1..={}",
            c_int::MAX
        ))),
    }
}

#[cfg(test)]
mod tests {
    // The mapping checked without a GPU: the arguments are fed to a plain column-major GEMM
    // written from the BLAS definition (`C = op(A)·op(B)`, element `(i, j)` of a column-major
    // matrix at `i + j·ld`), and the result compared with a row-major product computed
    // directly.

    use super::*;

    /// Element `(i, j)` of `op(X)` for a column-major `X` with leading dimension `ld`.
    fn op_at(x: &[f64], ld: i32, trans: i32, i: usize, j: usize) -> f64 {
        let ld = ld as usize;
        match trans {
            OP_N => x[i + j * ld],
            OP_T => x[j + i * ld],
            t => panic!("unexpected op {t}"),
        }
    }

    /// `C' = op(A')·op(B')`, column-major, as cuBLAS defines it.
    fn column_major_gemm(l: ColumnMajor, a: &[f64], b: &[f64]) -> Vec<f64> {
        let (m, n, k) = (l.m as usize, l.n as usize, l.k as usize);
        let mut c = vec![f64::NAN; l.ldc as usize * n];
        for j in 0..n {
            for i in 0..m {
                c[i + j * l.ldc as usize] = (0..k)
                    .map(|p| op_at(a, l.lda, l.trans_a, i, p) * op_at(b, l.ldb, l.trans_b, p, j))
                    .sum();
            }
        }
        c
    }

    fn values(len: usize, seed: u64) -> Vec<f64> {
        (0..len as u64)
            .map(|i| ((i * 2_654_435_761 + seed) % 1009) as f64 / 97.0 - 5.0)
            .collect()
    }

    #[test]
    fn row_major_gemm_is_the_transposed_column_major_product() {
        let (m, n, k) = (5usize, 3usize, 4usize);
        let a = values(m * k, 1);
        let b = values(k * n, 2);
        let want: Vec<f64> = (0..m * n)
            .map(|e| (0..k).map(|p| a[e / n * k + p] * b[p * n + e % n]).sum())
            .collect();
        let l = gemm_layout(m as i32, n as i32, k as i32, false);
        assert_eq!(column_major_gemm(l, &b, &a), want);

        // The same B stored as weights are: row-major [n×k].
        let bt: Vec<f64> = (0..n * k).map(|e| b[(e % k) * n + e / k]).collect();
        let l = gemm_layout(m as i32, n as i32, k as i32, true);
        assert_eq!(column_major_gemm(l, &bt, &a), want);
    }

    #[test]
    fn row_major_gemv_is_a_one_column_gemm_of_the_transpose() {
        let (rows, cols) = (7usize, 4usize);
        let w = values(rows * cols, 3);
        let x = values(cols, 4);
        let want: Vec<f64> = (0..rows)
            .map(|r| (0..cols).map(|c| w[r * cols + c] * x[c]).sum())
            .collect();
        let l = gemv_layout(rows as i32, cols as i32);
        assert_eq!(column_major_gemm(l, &w, &x), want);
        // Sgemv reads the matrix before `op` as `l.k × l.m` with leading dimension `l.lda`: W
        // read column-major, whose transpose times x is y.
        assert_eq!((l.k, l.m, l.lda), (cols as i32, rows as i32, cols as i32));
        let sgemv: Vec<f64> = (0..l.m as usize)
            .map(|j| {
                (0..l.k as usize)
                    .map(|i| w[i + j * l.lda as usize] * x[i])
                    .sum()
            })
            .collect();
        assert_eq!(sgemv, want);
    }
}
