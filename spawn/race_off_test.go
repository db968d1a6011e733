//go:build !race

package spawn

const raceDetector = false
