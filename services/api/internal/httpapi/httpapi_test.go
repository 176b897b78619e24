package httpapi

import (
	"encoding/json"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sundialhq/sundial/proto/openapi"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every method of both services has an HTTP route in the OpenAPI
// document: a method added to a .proto without a binding in http.yaml
// fails here, not in a user's hands.
func TestOpenAPICoversEveryMethod(t *testing.T) {
	var doc struct {
		Swagger string                                `json:"swagger"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openapi.Document, &doc); err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{}
	for _, methods := range doc.Paths {
		for _, raw := range methods {
			var op struct {
				OperationID string `json:"operationId"`
			}
			if err := json.Unmarshal(raw, &op); err == nil && op.OperationID != "" {
				ops[op.OperationID] = true
			}
		}
	}
	services := []protoreflect.ServiceDescriptor{
		sundialv1.File_sundial_v1_job_service_proto.Services().ByName("JobService"),
		sundialv1.File_sundial_v1_dead_letter_service_proto.Services().ByName("DeadLetterService"),
	}
	n := 0
	for _, s := range services {
		for i := range s.Methods().Len() {
			id := string(s.Name()) + "_" + string(s.Methods().Get(i).Name())
			n++
			if !ops[id] {
				t.Errorf("%s has no HTTP route (add it to proto/sundial/v1/http.yaml)", id)
			}
		}
	}
	if n < 16 || doc.Swagger != "2.0" {
		t.Fatalf("read %d methods, swagger %q", n, doc.Swagger)
	}
}
