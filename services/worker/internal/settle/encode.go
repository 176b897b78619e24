package settle

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func encode(dl *sundialv1.DeadLetter) ([]byte, error) {
	b, err := proto.Marshal(dl)
	if err != nil {
		return nil, fmt.Errorf("settle: encode dead letter: %w", err)
	}
	return b, nil
}

// DecodeDeadLetter decodes a DLQ record value of kind dead_letter.
func DecodeDeadLetter(b []byte) (*sundialv1.DeadLetter, error) {
	dl := &sundialv1.DeadLetter{}
	if err := proto.Unmarshal(b, dl); err != nil {
		return nil, fmt.Errorf("settle: decode dead letter: %w", err)
	}
	return dl, nil
}
