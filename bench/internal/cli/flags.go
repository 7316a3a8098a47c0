package cli

import (
	"errors"
	"strings"
)

// FlagParseError rewords what the flag package says of a command line
// (err from FlagSet.Parse, not ErrHelp) in the commands' words: an
// unknown flag, or a flag without its value.
func FlagParseError(cmd string, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		return errors.New(name + ": unknown flag (run " + cmd + " -h for the list)")
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return errors.New(name + ": needs a value")
	}
	return err
}
