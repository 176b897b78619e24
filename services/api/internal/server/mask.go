package server

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// updatable are the top-level job fields UpdateJob may change, in the
// order "*" expands to. Paths may also go deeper into the message fields
// among them (schedule.cron, retry.max_attempts, target.http.url).
var updatable = []string{
	"name", "labels", "schedule", "target", "payload", "priority", "retry",
	"attempt_timeout", "misfire", "overlap", "max_jitter", "callback_url", "max_concurrency",
	"max_runs",
}

// serverOwned are fields the server decides; the message says how to
// change them instead.
var serverOwned = map[string]string{
	"id":             "is the job's identity and cannot change",
	"tenant":         "comes from the caller's token and cannot change",
	"status":         "changes through PauseJob, ResumeJob and DeleteJob",
	"version":        "is bumped by the server on every change",
	"next_fire_time": "is computed by the server from the schedule",
	"create_time":    "is set by the server",
	"update_time":    "is set by the server",
	"remaining_runs": "is max_runs less the runs already staged; change max_runs instead",
}

var jobDesc = (&sundialv1.Job{}).ProtoReflect().Descriptor()

// resolveMask returns the paths UpdateJob applies. An empty mask means
// every updatable field the request's job sets (AIP-134); "*" means every
// updatable field, so unset ones return to their defaults.
func resolveMask(src *sundialv1.Job, mask *fieldmaskpb.FieldMask) ([]string, error) {
	paths := mask.GetPaths()
	if len(paths) == 0 {
		m := src.ProtoReflect()
		for _, name := range updatable {
			if m.Has(jobDesc.Fields().ByName(protoreflect.Name(name))) {
				paths = append(paths, name)
			}
		}
		if len(paths) == 0 {
			return nil, invalidf("update_mask", "is empty and the job sets no updatable field")
		}
		return paths, nil
	}
	var vs []jobspec.FieldViolation
	var out []string
	for _, p := range paths {
		p = strings.TrimSpace(p)
		if p == "*" {
			if len(paths) != 1 {
				vs = append(vs, jobspec.FieldViolation{Field: "update_mask", Description: `"*" must be the only path`})
				continue
			}
			return slices.Clone(updatable), nil
		}
		if msg := checkPath(p); msg != "" {
			vs = append(vs, jobspec.FieldViolation{Field: "update_mask", Description: msg})
			continue
		}
		out = append(out, p)
	}
	if len(vs) > 0 {
		return nil, invalid(vs...)
	}
	return out, nil
}

// checkPath returns "" when p names a field UpdateJob may set.
func checkPath(p string) string {
	segs := strings.Split(p, ".")
	if why, ok := serverOwned[segs[0]]; ok {
		return `"` + segs[0] + `" ` + why
	}
	if !slices.Contains(updatable, segs[0]) {
		return `"` + p + `" is not a field of Job`
	}
	md := jobDesc
	for i, seg := range segs {
		fd := md.Fields().ByName(protoreflect.Name(seg))
		if fd == nil {
			return `"` + p + `" is not a field of Job`
		}
		if i == len(segs)-1 {
			return ""
		}
		if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() {
			return `"` + p + `": ` + strings.Join(segs[:i+1], ".") + " has no sub-fields"
		}
		md = fd.Message()
	}
	return ""
}

// applyMask copies the fields paths name from src into dst; a field unset
// in src is cleared in dst. Setting a oneof member replaces its siblings.
func applyMask(dst, src proto.Message, paths []string) {
	for _, p := range paths {
		segs := strings.Split(p, ".")
		dm, sm := dst.ProtoReflect(), src.ProtoReflect()
		for _, seg := range segs[:len(segs)-1] {
			fd := dm.Descriptor().Fields().ByName(protoreflect.Name(seg))
			// Get on an unset message field is an empty read-only message:
			// every field under it reads as unset, which is what the
			// request means.
			sm = sm.Get(fd).Message()
			dm = dm.Mutable(fd).Message()
		}
		fd := dm.Descriptor().Fields().ByName(protoreflect.Name(segs[len(segs)-1]))
		if sm.Has(fd) {
			dm.Set(fd, sm.Get(fd))
		} else {
			dm.Clear(fd)
		}
	}
}

// touchesSchedule reports whether any path changes when the job fires.
func touchesSchedule(paths []string) bool {
	for _, p := range paths {
		if p == "schedule" || strings.HasPrefix(p, "schedule.") {
			return true
		}
	}
	return false
}
