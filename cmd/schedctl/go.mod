module github.com/sundialhq/sundial/cmd/schedctl

go 1.26.0

replace github.com/sundialhq/sundial/pkg => ../../pkg

replace github.com/sundialhq/sundial/proto => ../../proto
