module github.com/sundialhq/sundial/cmd/schedctl

go 1.26.0

replace github.com/sundialhq/sundial/pkg => ../../pkg

replace github.com/sundialhq/sundial/proto => ../../proto

require (
	github.com/sundialhq/sundial/pkg v0.0.0-00010101000000-000000000000
	github.com/sundialhq/sundial/proto v0.0.0-00010101000000-000000000000
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261005182115-fad411399dd8
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
	gopkg.in/yaml.v3 v3.0.1
)

require (
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
