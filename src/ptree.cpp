#include <ckpt/ptree.hpp>

#include <algorithm>
#include <stdexcept>

namespace ckpt {

ptree ptree::dict(dict_type entries) {
  for (auto it = entries.begin(); it != entries.end(); ++it)
    if (std::any_of(entries.begin(), it, [&](const auto& e) { return e.first == it->first; }))
      throw std::invalid_argument("ckpt: ptree::dict: duplicate key '" + it->first + "'");
  return ptree(node(std::move(entries)));
}

void ptree::wrong_kind(const char* wanted) const {
  static constexpr const char* kinds[] = {"a dict", "a list", "a tensor"};
  throw std::invalid_argument(std::string("ckpt: ptree: expected ") + wanted + ", got " +
                              kinds[node_.index()]);
}

const ptree::dict_type& ptree::as_dict() const {
  if (!is_dict()) wrong_kind("a dict");
  return std::get<dict_type>(node_);
}
ptree::dict_type& ptree::as_dict() {
  if (!is_dict()) wrong_kind("a dict");
  return std::get<dict_type>(node_);
}
const ptree::list_type& ptree::as_list() const {
  if (!is_list()) wrong_kind("a list");
  return std::get<list_type>(node_);
}
ptree::list_type& ptree::as_list() {
  if (!is_list()) wrong_kind("a list");
  return std::get<list_type>(node_);
}
const ckpt::tensor& ptree::as_tensor() const {
  if (!is_tensor()) wrong_kind("a tensor");
  return std::get<ckpt::tensor>(node_);
}
ckpt::tensor& ptree::as_tensor() {
  if (!is_tensor()) wrong_kind("a tensor");
  return std::get<ckpt::tensor>(node_);
}

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
