//! The receiver of a hot method, checked without `rb_protect`.
//!
//! magnus converts `self` with `rb_check_typeddata` inside `rb_protect`
//! (a setjmp) on every call, which is a third of the cost of `fire`. None of
//! our classes is subclassed on the native side, so an exact comparison of
//! the data type pointer is the same check, and it cannot raise.

use magnus::{rb_sys::AsRawValue, typed_data::DataType, TypedData, Value};
use rb_sys::{
    rb_data_type_t, ruby_value_type, RB_TYPE_P, RTYPEDDATA_GET_DATA, RTYPEDDATA_P, RTYPEDDATA_TYPE,
};

/// `value` as a `&T` if it is an object wrapping a `T`, else `None`.
#[inline]
pub fn receiver<T: TypedData>(value: &Value) -> Option<&T> {
    let raw = value.as_raw();
    // `DataType` is a transparent wrapper of `rb_data_type_t`.
    let expected = (T::data_type() as *const DataType).cast::<rb_data_type_t>();
    // SAFETY: RB_TYPE_P accepts any VALUE (immediates included); the
    // RTYPEDDATA_* accessors are only reached for T_DATA objects, and the
    // data of an object of our data type is a live `T` owned by the object,
    // which outlives the borrow of `value` (the caller's receiver).
    unsafe {
        if !RB_TYPE_P(raw, ruby_value_type::RUBY_T_DATA)
            || !RTYPEDDATA_P(raw)
            || RTYPEDDATA_TYPE(raw) != expected
        {
            return None;
        }
        RTYPEDDATA_GET_DATA(raw).cast::<T>().as_ref()
    }
}
