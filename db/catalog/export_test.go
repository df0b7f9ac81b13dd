package catalog

// Deprecate marks type name deprecated for the duration of a test (which
// must not run in parallel with others of the package reading it) and
// returns the undo.
func Deprecate(name string, d Deprecation) (undo func()) {
	for i := range declared {
		if declared[i].Name == name {
			declared[i].Deprecated = &d
			return func() { declared[i].Deprecated = nil }
		}
	}
	panic("no type " + name)
}
