#include <ckpt/ptree.hpp>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <type_traits>

namespace ckpt {

ptree ptree::dict(dict_type entries) {
  for (auto it = entries.begin(); it != entries.end(); ++it)
    if (std::any_of(entries.begin(), it, [&](const auto& e) { return e.first == it->first; }))
      throw std::invalid_argument("ckpt: ptree::dict: duplicate key '" + it->first + "'");
  return ptree(node(std::move(entries)));
}

template <class T, class Self>
auto& ptree::get(Self& self) {
  if (auto* x = std::get_if<T>(&self.node_)) return *x;
  static constexpr const char* kinds[] = {"a dict", "a list", "a tensor"};
  constexpr std::size_t wanted = std::is_same_v<T, dict_type> ? 0 : std::is_same_v<T, list_type> ? 1 : 2;
  throw std::invalid_argument(std::string("ckpt: ptree: expected ") + kinds[wanted] +
                              ", got " + kinds[self.node_.index()]);
}

const ptree::dict_type& ptree::as_dict() const { return get<dict_type>(*this); }
ptree::dict_type& ptree::as_dict() { return get<dict_type>(*this); }
const ptree::list_type& ptree::as_list() const { return get<list_type>(*this); }
ptree::list_type& ptree::as_list() { return get<list_type>(*this); }
const ckpt::tensor& ptree::as_tensor() const { return get<ckpt::tensor>(*this); }
ckpt::tensor& ptree::as_tensor() { return get<ckpt::tensor>(*this); }

const ptree* ptree::find(std::string_view key) const {
  for (const auto& [k, v] : as_dict())
    if (k == key) return &v;
  return nullptr;
}

const ptree& ptree::at(std::string_view key) const {
  if (const ptree* p = find(key)) return *p;
  throw std::invalid_argument("ckpt: ptree: no key '" + std::string(key) + "'");
}

const ptree& ptree::at(std::size_t index) const {
  const list_type& elements = as_list();
  if (index >= elements.size())
    throw std::out_of_range("ckpt: ptree: index " + std::to_string(index) + " past a list of " +
                            std::to_string(elements.size()));
  return elements[index];
}

}  // namespace ckpt
