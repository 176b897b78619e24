// Package config loads a service's settings once, in main, from command-line
// flags and SUNDIAL_* environment variables, and collects validation errors
// that name the setting at fault. Nothing below main reads the environment.
//
// Precedence: a flag given on the command line wins; otherwise the
// environment variable SUNDIAL_<FLAG> (upper case, '-' and '.' as '_');
// otherwise the default the flag was registered with.
package config

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// EnvPrefix starts every environment variable Sundial reads.
const EnvPrefix = "SUNDIAL_"

// EnvName is the environment variable that sets flag name.
func EnvName(flagName string) string {
	r := strings.NewReplacer("-", "_", ".", "_")
	return EnvPrefix + strings.ToUpper(r.Replace(flagName))
}

// Load parses args into fs, then fills every flag not given on the command
// line from its environment variable, looked up with getenv (os.LookupEnv in
// main, a map in tests).
func Load(fs *flag.FlagSet, args []string, getenv func(string) (string, bool)) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		name := EnvName(f.Name)
		v, ok := getenv(name)
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	})
	return errors.Join(errs...)
}

// Problems collects validation errors, each naming its setting.
type Problems struct{ errs []error }

// Addf records a problem with setting name.
func (p *Problems) Addf(name, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...)))
}

// Err is nil when nothing was recorded, otherwise all problems joined.
func (p *Problems) Err() error { return errors.Join(p.errs...) }
