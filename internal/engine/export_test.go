package engine

// OnlyOnForTest makes flag name mean something on engine k only, until the
// returned function restores the table: no serve flag is PostgreSQL-only
// today, and the warning must work in that direction too.
func OnlyOnForTest(name string, k Kind) (restore func()) {
	old, had := onlyOn[name]
	onlyOn[name] = k
	return func() {
		if had {
			onlyOn[name] = old
		} else {
			delete(onlyOn, name)
		}
	}
}
