// Turns an ABI fact (a number, a float, a bool or a typeid name) into text, for comparing two headers' facts.
#pragma once

#include <string>
#include <type_traits>

template <class T>
std::string weftAbiText(const T& value) {
  if constexpr (std::is_convertible_v<T, const char*>) {
    return value;
  } else {
    return std::to_string(value);
  }
}
