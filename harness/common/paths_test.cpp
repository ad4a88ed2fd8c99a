#include "harness/common/paths.h"
#include "harness/common/error.h"

#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

namespace coldstart::paths {
namespace {

TEST(Paths, NormalizeCollapsesDotsAndSlashes) {
  EXPECT_EQ(normalize("a/./b//c/../d"), "a/b/d");
  EXPECT_EQ(normalize("scenarios/../fixtures/x.json"), "fixtures/x.json");
  EXPECT_EQ(normalize("../a/../../b"), "../../b");
  EXPECT_EQ(normalize("/a/../../b"), "/b");
  EXPECT_EQ(normalize("./"), ".");
}

TEST(Paths, Components) {
  EXPECT_EQ(parent("a/b/c.yaml"), "a/b");
  EXPECT_EQ(parent("c.yaml"), "");
  EXPECT_EQ(parent("/c"), "/");
  EXPECT_EQ(filename("a/b/c.yaml"), "c.yaml");
  EXPECT_EQ(stem("a/b/c.yaml"), "c");
  EXPECT_EQ(stem(".hidden"), ".hidden");
  EXPECT_EQ(join("a", "b"), "a/b");
  EXPECT_EQ(join("a/", "b"), "a/b");
  EXPECT_EQ(join("a", "/abs"), "/abs");
  EXPECT_EQ(join("", "b"), "b");
}

TEST(Paths, TempDirMakeDirsAndRemoveTree) {
  const std::string root = make_temp_dir("cs-paths-test-");
  ASSERT_TRUE(is_directory(root));
  const std::string deep = join(root, "x/y/z");
  make_dirs(deep);
  ASSERT_TRUE(is_directory(deep));
  std::ofstream(join(deep, "f.txt")) << "data";
  EXPECT_TRUE(exists(join(deep, "f.txt")));
  EXPECT_FALSE(is_directory(join(deep, "f.txt")));
  EXPECT_TRUE(remove_tree(root));
  EXPECT_FALSE(exists(root));
  EXPECT_TRUE(remove_tree(root));  // already gone: nothing to do
}

TEST(Paths, MakeDirsReportsTheFailingPath) {
  try {
    make_dirs("/proc/cs-cannot-create/x");
    FAIL() << "creating under /proc must fail";
  } catch (const coldstart::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/cs-cannot-create"), std::string::npos) << e.what();
  }
}

TEST(Paths, WriteFileAtomicReplacesWholeAndLeavesNoTemporary) {
  const std::string root = make_temp_dir("cs-paths-atomic-");
  const std::string file = join(root, "out.json");
  write_file_atomic(file, "first");
  write_file_atomic(file, std::string("sec\0nd", 7));  // binary-safe
  std::ifstream in(file, std::ios::binary);
  std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, std::string("sec\0nd", 7));
  struct stat st;
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  // Only the target is left in the directory.
  int entries = 0;
  DIR* d = opendir(root.c_str());
  while (dirent* e = readdir(d)) entries += std::string(e->d_name) != "." && std::string(e->d_name) != "..";
  closedir(d);
  EXPECT_EQ(entries, 1);
  try {
    write_file_atomic(join(root, "missing-dir/out.json"), "x");
    FAIL() << "writing into a missing directory must fail";
  } catch (const coldstart::Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing-dir/out.json"), std::string::npos) << e.what();
  }
  remove_tree(root);
}

// Inputs that are not regular files or are too large are refused at once (issue 10 item): a FIFO
// used to block the reader forever and /dev/zero to be read until memory ran out.
TEST(Paths, ReadInputFileRefusesFifosDevicesDirectoriesAndLargeFiles) {
  const std::string root = make_temp_dir("cs-paths-read-");
  std::string data = "stale";
  const std::string file = join(root, "s.yaml");
  write_file_atomic(file, "name: x\n");
  EXPECT_EQ(read_input_file(file, 100, data), "");
  EXPECT_EQ(data, "name: x\n");

  const std::string fifo = join(root, "fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(read_input_file(fifo, 100, data), "is a FIFO, not a regular file");  // no writer: no hang
  EXPECT_EQ(data, "");
  EXPECT_EQ(read_input_file("/dev/zero", 100, data), "is a character device, not a regular file");
  EXPECT_EQ(read_input_file(root, 100, data), "is a directory");
  EXPECT_EQ(read_input_file(join(root, "missing"), 100, data), "No such file or directory");
  EXPECT_EQ(read_input_file(file, 4, data), "is 8 B, more than the 4 B such a file may be");
  EXPECT_EQ(data, "");
  write_file_atomic(file, std::string((17u << 20), 'x'));
  EXPECT_EQ(read_input_file(file, kMaxScenarioBytes, data),
            "is 17.0 MiB, more than the 16 MiB such a file may be");
  EXPECT_EQ(size_text(512u << 10), "512 KiB");

  // A directory of tables: only the files the harness would read (*.json here) are looked at.
  const std::string tables = join(root, "tables");
  make_dirs(join(tables, "fused_moe"));
  write_file_atomic(join(tables, "fused_moe/E=8.json"), "{}");
  EXPECT_EQ(find_unreadable_input(tables, ".json", 100), "");
  ASSERT_EQ(::mkfifo(join(tables, "notes").c_str(), 0600), 0);
  EXPECT_EQ(find_unreadable_input(tables, ".json", 100), "");
  ASSERT_EQ(::mkfifo(join(tables, "fused_moe/E=16.json").c_str(), 0600), 0);
  EXPECT_EQ(find_unreadable_input(tables, ".json", 100),
            join(tables, "fused_moe/E=16.json") + ": is a FIFO, not a regular file");
  EXPECT_EQ(find_unreadable_input(tables, ".json", 100, 0), "");  // not below max_depth
  // Links to an enclosing directory multiply the entries: bounded, and a problem.
  const std::string loops = join(root, "loops");
  make_dirs(loops);
  for (int i = 0; i < 40; ++i)
    ASSERT_EQ(::symlink(".", join(loops, "l" + std::to_string(i)).c_str()), 0);
  EXPECT_NE(find_unreadable_input(loops, ".json", 100).find("more than 100000 entries below it"),
            std::string::npos);
  remove_tree(root);
}

// Outputs that would destroy data or cannot be written are refused before anything runs.
TEST(Paths, CheckOutputPathsRefusesInputsDuplicatesDirectoriesAndMissingDirs) {
  const std::string root = make_temp_dir("cs-paths-out-");
  const std::string in = join(root, "in.json");
  write_file_atomic(in, "{}");
  const std::string a = join(root, "a.md"), b = join(root, "b.html");
  EXPECT_NO_THROW(check_output_paths({a, "", b}, {in}));
  auto message = [&](const std::vector<std::string>& outs) {
    try {
      check_output_paths(outs, {in});
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(message({a, in}).find("is an input of this run"), std::string::npos);
  EXPECT_NE(message({join(root, "./in.json")}).find("is an input"), std::string::npos) << "by inode";
  EXPECT_NE(message({a, join(root, ".//a.md")}).find("also given as another output"),
            std::string::npos)
      << "the same path spelled twice, file not there yet";
  EXPECT_NE(message({root}).find("is a directory"), std::string::npos);
  EXPECT_NE(message({join(root, "missing/a.md")}).find("does not exist or is not writable"),
            std::string::npos);
  EXPECT_TRUE(remove_tree(root));
}

// Two outputs through different spellings of one directory land on one file, even before it
// exists; a spelling through a link and "..", which lands elsewhere, is no collision.
TEST(Paths, CheckOutputPathsComparesOutputsByResolvedDirectory) {
  const std::string root = make_temp_dir("cs-paths-identity-");
  const std::string out = join(root, "out"), sub = join(root, "out/sub");
  make_dirs(sub);
  const std::string link = join(root, "link");
  ASSERT_EQ(::symlink(sub.c_str(), link.c_str()), 0);  // link -> out/sub
  auto message = [&](const std::vector<std::string>& outs) {
    try {
      check_output_paths(outs, {});
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  // link/../a.md is out/a.md (the kernel resolves link first), as is out/sub/../a.md.
  EXPECT_NE(message({join(out, "a.md"), join(link, "../a.md")}).find("also given as another output"),
            std::string::npos);
  EXPECT_NE(message({join(out, "a.md"), join(sub, "../a.md")}).find("also given as another output"),
            std::string::npos);
  EXPECT_NE(message({join(sub, "q.md"), join(link, "q.md")}).find("also given as another output"),
            std::string::npos);
  // A name of 255 bytes is legal and written (its temporary file has a short name of its own);
  // one of 256 is refused before anything runs.
  const std::string longest = join(root, std::string(251, 'y') + ".md");
  EXPECT_EQ(message({longest}), "(accepted)");
  write_file_atomic(longest, "ok");
  EXPECT_TRUE(exists(longest));
  EXPECT_NE(message({join(root, std::string(253, 'y') + ".md")}).find("past the file system's limit"),
            std::string::npos);
  // Lexically link/../q.md is root/q.md, but it lands in out/: no collision with root/q.md.
  EXPECT_EQ(message({join(root, "q.md"), join(link, "../q.md")}), "(accepted)");
  EXPECT_TRUE(remove_tree(root));
}

// Outputs are renamed over their path: a symbolic link, device node or FIFO there would be
// replaced by a regular file, so only --force (replace_special) lets one through.
TEST(Paths, CheckOutputPathsRefusesLinksDevicesAndFifosUnlessForced) {
  const std::string root = make_temp_dir("cs-paths-special-");
  const std::string target = join(root, "elsewhere.json");
  write_file_atomic(target, "{}");
  const std::string link = join(root, "link.json"), fifo = join(root, "fifo.json");
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto message = [&](const std::string& out, bool force) {
    try {
      check_output_paths({out}, {}, force);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(message(link, false).find("is a symbolic link (to '" + target + "')"), std::string::npos)
      << message(link, false);
  EXPECT_NE(message(link, false).find("--force"), std::string::npos);
  EXPECT_NE(message(fifo, false).find("is a FIFO"), std::string::npos) << message(fifo, false);
  EXPECT_NE(message("/dev/null", false).find("is a character device"), std::string::npos);
  // A device node is never replaced, and --force is not offered for it.
  EXPECT_EQ(message("/dev/null", false).find("--force"), std::string::npos);
  EXPECT_NE(message("/dev/null", true).find("is a character device"), std::string::npos);
  EXPECT_EQ(message(link, true), "(accepted)");
  EXPECT_EQ(message(fifo, true), "(accepted)");
  // A regular file or a new path is fine without --force.
  EXPECT_EQ(message(target, false), "(accepted)");
  EXPECT_EQ(message(join(root, "new.json"), false), "(accepted)");
  EXPECT_EQ(special_file_kind(target), "");
  EXPECT_EQ(special_file_kind(join(root, "new.json")), "");
  EXPECT_TRUE(remove_tree(root));
}

TEST(Paths, SelfExecutableIsThisTest) {
  EXPECT_NE(self_executable().find("paths_test"), std::string::npos);
}

}  // namespace
}  // namespace coldstart::paths
