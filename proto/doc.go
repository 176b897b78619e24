// Package proto holds Sundial's wire contracts; the generated Go lives in
// sundial/v1 (package sundialv1). Regenerate with `make proto`.
package proto
