package main

import "errors"

func writeFixtures(dir string) error { return errors.New("todo " + dir) }
