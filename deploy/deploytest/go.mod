module github.com/sundialhq/sundial/deploy/deploytest

go 1.26.0

replace github.com/sundialhq/sundial/pkg => ../../pkg

replace github.com/sundialhq/sundial/proto => ../../proto

require gopkg.in/yaml.v3 v3.0.1
