{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Weight memories of the compute layers (dense and conv2d, see "K2C.Engine").

A layer's weights live in a file (@weights/<layer>.mem@, one word per line in
ASCII binary, MSB first) rather than in Haskell constants: Clash elaborates
much faster and emits far smaller HDL when the ROM is a @$readmemb@ file.

= Word layout (docs/reference/project.md, "Weight memory files")

A layer with @F@ filters (neurons) over windows of @K@ values, computed by @p@
processing elements in @b@ cycles per window, has @G = ceil(F / p)@ groups
and @ch = ceil(K / b)@ window values per chunk. Its ROM has @G * b@ words;
word @g * b + t@ holds, for processing element @j = 0 .. p-1@, filter
@g * p + j@'s chunk @t@: the weights of window elements @t*ch .. t*ch+ch-1@
(elements past @K@ and filters past @F@ are zero) and a bias field, which is
the filter's bias in chunk @t = 0@ and zero in the other chunks.

A word is packed exactly as Clash packs @Vec p (Vec ch w, bias)@: processing
element 0 in the most significant bits, and within an element its @ch@
weights (window element @t*ch@ first, most significant) followed by its bias
field. Every value is its raw two's-complement integer (@BitSize w@ bits for a
weight, @BitSize bias@ for the bias). With @b = 1@ this is the round-1 layout.
-}
module K2C.Memory
  ( WeightRom (..)
  , Neuron
  , romWords
  , readWeights
  ) where

import Clash.Prelude

-- | What one processing element reads in one cycle: one chunk of @ch@ weights
-- of a neuron (filter) and its bias field.
type Neuron ch w bias = (Vec ch w, bias)

-- | A typed path to a weight file of @words@ words, each holding @p@ neuron
-- chunks of @ch@ weights in format @w@ plus a bias field in format @bias@.
-- The types carry the geometry so that a file and the layer using it cannot
-- disagree about sizes.
newtype WeightRom (words :: Nat) (p :: Nat) (ch :: Nat) w bias = WeightRom FilePath

-- | The number of words in the memory (cycles a layer spends on one window).
romWords :: forall words p ch w bias . KnownNat words => WeightRom words p ch w bias -> Int
romWords _ = natToNum @words

-- | Read word @address@. Like every synchronous ROM the answer arrives one
-- cycle after the address; the output in the very first cycle is undefined
-- (the ROM has no reset), so callers only look at words they asked for.
--
-- Size: @words * p * (ch * BitSize w + BitSize bias)@ bits.
--
-- The file must hold exactly @words@ lines of @p * (ch * BitSize w +
-- BitSize bias)@ bits. Clash 1.6.4 does not check this: in Haskell simulation
-- a missing line shows up only when read, as
-- @(Array.!): undefined array element@.
readWeights
  :: forall dom words p ch w bias
   . ( HiddenClock dom, HiddenEnable dom
     , KnownNat words, KnownNat p, KnownNat ch, BitPack w, BitPack bias )
  => WeightRom words p ch w bias
  -> Signal dom (Index words)
  -> Signal dom (Vec p (Neuron ch w bias))
readWeights (WeightRom path) address = unpack <$> romFile (SNat @words) path address
