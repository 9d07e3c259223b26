package main

import (
	"fmt"
	"reflect"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireLen     = 2
	wireFixed32 = 5
)

// marshaler is the protobuf marshalling the Go API types are generated with.
type marshaler interface {
	Marshal() ([]byte, error)
}

// check marshals a value of the message's Go type with every field set and compares the field
// numbers and wire types the Go code writes with the table's: the struct tags are not always
// right about wire types, the generated marshalling code is.
func (m *message) check() error {
	value := reflect.New(m.goType)
	for i := range m.goType.NumField() {
		f := m.goType.Field(i)
		if f.IsExported() && f.Tag.Get("protobuf") != "" {
			value.Elem().Field(i).Set(sample(f.Type))
		}
	}
	encoder, ok := value.Interface().(marshaler)
	if !ok {
		return fmt.Errorf("no protobuf marshalling")
	}
	data, err := encoder.Marshal()
	if err != nil {
		return err
	}
	written := map[int]int{}
	for len(data) > 0 {
		key, n := varint(data)
		if n == 0 {
			return fmt.Errorf("unreadable marshalled data")
		}
		data = data[n:]
		number, wire := int(key>>3), int(key&7)
		written[number] = wire
		switch wire {
		case wireVarint:
			_, n = varint(data)
		case wireFixed64:
			n = 8
		case wireFixed32:
			n = 4
		case wireLen:
			length, l := varint(data)
			n = l + int(length)
			if l == 0 {
				n = 0
			}
		default:
			return fmt.Errorf("field %d has wire type %d", number, wire)
		}
		if n == 0 || n > len(data) {
			return fmt.Errorf("unreadable marshalled data")
		}
		data = data[n:]
	}
	for _, f := range m.fields {
		wire, ok := written[f.number]
		if !ok {
			return fmt.Errorf("field %d of the table is not written by the Go code", f.number)
		}
		if !slices.Contains(f.wires, wire) {
			return fmt.Errorf("field %d is written with wire type %d, the table expects %v", f.number, wire, f.wires)
		}
		delete(written, f.number)
	}
	for number := range written {
		return fmt.Errorf("field %d is written by the Go code but not in the table", number)
	}
	return nil
}

// varint reads a protobuf varint: its value and its length (0 when unreadable).
func varint(data []byte) (uint64, int) {
	var value uint64
	for i := 0; i < len(data) && i < 10; i++ {
		value |= uint64(data[i]&0x7f) << (7 * i)
		if data[i]&0x80 == 0 {
			return value, i + 1
		}
	}
	return 0, 0
}

// sample is a value of t that is not zero where that makes a difference on the wire (nested
// structs stay zero: each is checked as a message of its own).
func sample(t reflect.Type) reflect.Value {
	switch t {
	case reflect.TypeFor[metav1.Time]():
		return reflect.ValueOf(created)
	case reflect.TypeFor[metav1.MicroTime]():
		return reflect.ValueOf(observed)
	case reflect.TypeFor[resource.Quantity]():
		return reflect.ValueOf(resource.MustParse("1"))
	case reflect.TypeFor[intstr.IntOrString]():
		return reflect.ValueOf(intstr.FromInt32(1))
	case reflect.TypeFor[runtime.RawExtension]():
		return reflect.ValueOf(runtime.RawExtension{Raw: []byte("{}")})
	case reflect.TypeFor[metav1.FieldsV1]():
		return reflect.ValueOf(metav1.FieldsV1{Raw: []byte("{}")})
	case reflect.TypeFor[apiextensionsv1.JSON]():
		return reflect.ValueOf(apiextensionsv1.JSON{Raw: []byte("1")})
	}
	v := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(t.Elem()))
		v.Elem().Set(sample(t.Elem()))
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint8:
		v.SetUint('x')
	case reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(t, 1, 1))
		v.Index(0).Set(sample(t.Elem()))
	case reflect.Map:
		v.Set(reflect.MakeMap(t))
		v.SetMapIndex(sample(t.Key()), sample(t.Elem()))
	}
	return v
}
