// Package ptxtest writes stand-in PTX images for tests: images that declare
// the entry points a test names, with empty bodies. The simulator and
// kabi.Load read only the .entry names and .param sizes, so these stand
// in for the generated PTX where a test must not depend on what ptx/ holds
// (it predates the sources) or must control the entry list.
package ptxtest
