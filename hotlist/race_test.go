//go:build race

package hotlist

const raceEnabled = true
