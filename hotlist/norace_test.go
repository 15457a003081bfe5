//go:build !race

package hotlist

const raceEnabled = false
